package servicediscovery_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// wantImport is what a cluster's import of a service must look like.
type wantImport struct {
	typ mcsv1beta1.ServiceImportType
	// ports as "name:port/protocol", in order.
	ports []string
	// endpoints maps each source cluster to its addresses, sorted.
	endpoints map[string][]string
	// secondary is set for an import of a cluster on the secondary network: a ClusterSetIP
	// import then has no virtual IP and is marked for DNS to answer with its endpoints.
	secondary bool
}

// imported is what a cluster holds for the import of a service.
type imported struct {
	si      *mcsv1beta1.ServiceImport
	derived []corev1.Service
	slices  []discoveryv1.EndpointSlice
}

func getImported(ctx context.Context, c client.Client, key types.NamespacedName) (imported, error) {
	var out imported
	si := &mcsv1beta1.ServiceImport{}
	if err := c.Get(ctx, key, si); err == nil {
		out.si = si
	} else if !apierrors.IsNotFound(err) {
		return out, err
	}
	svcs := &corev1.ServiceList{}
	if err := c.List(ctx, svcs, client.InNamespace(key.Namespace), client.MatchingLabels{mcsv1beta1.LabelServiceName: key.Name, kube.ManagedByLabel: kube.FieldManager}); err != nil {
		return out, err
	}
	out.derived = svcs.Items
	sl := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, sl, client.InNamespace(key.Namespace), client.MatchingLabels{mcsv1beta1.LabelServiceName: key.Name}); err != nil {
		return out, err
	}
	out.slices = sl.Items
	return out, nil
}

// checkImport compares the import of key in c with want and returns the first difference.
func checkImport(ctx context.Context, c client.Client, key types.NamespacedName, want wantImport) (imported, string) {
	got, err := getImported(ctx, c, key)
	if err != nil {
		return got, err.Error()
	}
	if got.si == nil {
		return got, "no ServiceImport"
	}
	si := got.si
	var ports []string
	for _, p := range si.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol))
	}
	if si.Spec.Type != want.typ || !slices.Equal(ports, want.ports) {
		return got, fmt.Sprintf("ServiceImport type %s ports %v, want %s %v", si.Spec.Type, ports, want.typ, want.ports)
	}
	var clusters, wantClusters []string
	for _, cs := range si.Status.Clusters {
		clusters = append(clusters, cs.Cluster)
	}
	for c := range want.endpoints {
		wantClusters = append(wantClusters, c)
	}
	sort.Strings(wantClusters)
	if !slices.Equal(clusters, wantClusters) {
		return got, fmt.Sprintf("status.clusters %v, want %v", clusters, wantClusters)
	}

	if marked := si.Annotations[v1alpha1.AddressingAnnotation] == string(v1alpha1.AddressingSecondary); marked != want.secondary {
		return got, fmt.Sprintf("ServiceImport annotations %v, want the secondary mark %v", si.Annotations, want.secondary)
	}
	serviceName := "" // the kubernetes.io/service-name the slices must carry
	switch {
	case want.typ == mcsv1beta1.ClusterSetIP && want.secondary:
		// No virtual IP: kube-proxy's ClusterIP is not reachable over net1.
		if len(got.derived) != 0 || len(si.Spec.IPs) != 0 {
			return got, fmt.Sprintf("secondary ClusterSetIP import with %d derived Services and ips %v", len(got.derived), si.Spec.IPs)
		}
	case want.typ == mcsv1beta1.ClusterSetIP:
		if len(got.derived) != 1 {
			return got, fmt.Sprintf("%d derived Services, want 1", len(got.derived))
		}
		d := got.derived[0]
		serviceName = d.Name
		if d.Spec.Type != corev1.ServiceTypeClusterIP || len(d.Spec.Selector) != 0 || !slices.Equal(si.Spec.IPs, d.Spec.ClusterIPs) || len(si.Spec.IPs) == 0 {
			return got, fmt.Sprintf("derived Service %s: type %s selector %v clusterIPs %v; import ips %v", d.Name, d.Spec.Type, d.Spec.Selector, d.Spec.ClusterIPs, si.Spec.IPs)
		}
		// Made before the import (its ClusterIPs are the import's spec.ips), so owned by none.
		if len(d.OwnerReferences) != 0 {
			return got, fmt.Sprintf("derived Service %s has owners %+v, want none", d.Name, d.OwnerReferences)
		}
		var dports []string
		for _, p := range d.Spec.Ports {
			dports = append(dports, fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol))
		}
		if !slices.Equal(dports, want.ports) {
			return got, fmt.Sprintf("derived Service ports %v, want %v", dports, want.ports)
		}
	case want.typ == mcsv1beta1.Headless:
		if len(got.derived) != 0 || len(si.Spec.IPs) != 0 {
			return got, fmt.Sprintf("headless import with %d derived Services and ips %v", len(got.derived), si.Spec.IPs)
		}
	}

	endpoints := map[string][]string{}
	for _, s := range got.slices {
		src := s.Labels[mcsv1beta1.LabelSourceCluster]
		if s.Labels[discoveryv1.LabelManagedBy] != "servicediscovery.octopus.io" || s.Labels[discoveryv1.LabelServiceName] != serviceName || src == "" {
			return got, fmt.Sprintf("slice %s labels %v; want managed-by servicediscovery.octopus.io, kubernetes.io/service-name %q", s.Name, s.Labels, serviceName)
		}
		if !metav1.IsControlledBy(&s, si) {
			return got, fmt.Sprintf("slice %s is not owned by the import", s.Name)
		}
		for _, ep := range s.Endpoints {
			endpoints[src] = append(endpoints[src], ep.Addresses...)
		}
	}
	for c := range endpoints {
		sort.Strings(endpoints[c])
	}
	if fmt.Sprint(endpoints) != fmt.Sprint(want.endpoints) {
		return got, fmt.Sprintf("endpoints %v, want %v", endpoints, want.endpoints)
	}
	return got, ""
}

func (f *fabric) waitImport(t *testing.T, member string, key types.NamespacedName, want wantImport) imported {
	t.Helper()
	var got imported
	eventually(t, fmt.Sprintf("the import of %s in %s", key, member), func(ctx context.Context) string {
		var msg string
		got, msg = checkImport(ctx, f.members[member], key, want)
		return msg
	})
	return got
}

func (f *fabric) waitNoImport(t *testing.T, member string, key types.NamespacedName) {
	t.Helper()
	eventually(t, fmt.Sprintf("no import of %s in %s", key, member), func(ctx context.Context) string {
		got, err := getImported(ctx, f.members[member], key)
		if err != nil {
			return err.Error()
		}
		if got.si != nil || len(got.derived)+len(got.slices) > 0 {
			return fmt.Sprintf("import %v, %d derived Services, %d slices", got.si != nil, len(got.derived), len(got.slices))
		}
		return ""
	})
}

func clusterIPService(namespace, name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: corev1.ServiceSpec{Ports: ports}}
}

// serve gives the selectorless Service key in member one ready endpoint, as the EndpointSlice
// controller would for a ready pod (an address of the member's pod CIDR picked by the
// service's name, ports named as the Service's, each targeting the same number), and returns
// its address: what the other clusters must import. Calling it again returns the same address.
func (f *fabric) serve(t *testing.T, member string, key types.NamespacedName) string {
	t.Helper()
	c := f.members[member]
	svc := &corev1.Service{}
	if err := c.Get(t.Context(), key, svc); err != nil {
		t.Fatal(err)
	}
	h := fnv.New32a()
	h.Write([]byte(key.String()))
	ip := f.env.Cluster(member).PodCIDR.Addr().As4()
	ip[2], ip[3] = byte(h.Sum32()>>8), byte(h.Sum32()%250+2)
	addr := netip.AddrFrom4(ip).String()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name + "-pods", Labels: map[string]string{
			discoveryv1.LabelServiceName: key.Name, discoveryv1.LabelManagedBy: "test.octopus.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(protocolOr(p.Protocol)), Port: ptr.To(p.Port)})
	}
	if err := c.Create(t.Context(), slice); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the endpoints of %s in %s: %v", key, member, err)
	}
	return addr
}

func protocolOr(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// waitConflict waits until the export has the Conflict condition with reason (and status True
// unless reason is NoConflicts).
func waitConflict(t *testing.T, c client.Client, key types.NamespacedName, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("ServiceExport %s Conflict=%s", key, reason), func(ctx context.Context) string {
		ex := &mcsv1beta1.ServiceExport{}
		if err := c.Get(ctx, key, ex); err != nil {
			return err.Error()
		}
		want := metav1.ConditionTrue
		if reason == "NoConflicts" {
			want = metav1.ConditionFalse
		}
		for _, cond := range ex.Status.Conditions {
			if cond.Type == string(mcsv1beta1.ServiceExportConditionConflict) && cond.Reason == reason && cond.Status == want {
				return ""
			}
		}
		return fmt.Sprintf("conditions %+v", ex.Status.Conditions)
	})
}

func TestImport(t *testing.T) {
	f := newFabric(t, "east", "west", "north")
	east, west, north := f.members["east"], f.members["west"], f.members["north"]
	create(t, east, namespace("shop"))
	create(t, west, namespace("shop"))
	web := types.NamespacedName{Namespace: "shop", Name: "web"}

	t.Run("ClusterSetIP from one cluster: import, derived Service, slices; only where the namespace exists", func(t *testing.T) {
		measuredBefore := propagationCount(t, "east")
		create(t, east, clusterIPService("shop", "web", corev1.ServicePort{Name: "http", Port: 80}), export("shop", "web"))
		eastIP := f.serve(t, "east", web)
		want := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP"}, endpoints: map[string][]string{"east": {eastIP}}}
		f.waitImport(t, "west", web, want)
		f.waitImport(t, "east", web, want) // the exporting cluster consumes the cluster set's service too

		// north has no namespace shop, so no import; it appears with the namespace.
		if err := north.Get(t.Context(), client.ObjectKey{Name: "shop"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Fatalf("namespace shop in north: %v", err)
		}
		create(t, north, namespace("shop"))
		f.waitImport(t, "north", web, want)

		// Each of the three agents measured the propagation of east's export once, in the
		// registry the agent's controller serves.
		eventually(t, "the propagation measured", func(context.Context) string {
			if n := propagationCount(t, "east") - measuredBefore; n != 3 {
				return fmt.Sprintf("%d propagations of east's exports measured, want 3", n)
			}
			return ""
		})
	})

	var westBefore imported
	t.Run("a second exporter: union of ports, its endpoints added, nothing recreated, the difference a conflict", func(t *testing.T) {
		var err error
		if westBefore, err = getImported(t.Context(), west, web); err != nil || westBefore.si == nil || len(westBefore.derived) != 1 {
			t.Fatalf("west's import before: %+v, %v", westBefore, err)
		}
		create(t, west, clusterIPService("shop", "web", corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "metrics", Port: 9090}), export("shop", "web"))
		eastIP, westIP := f.serve(t, "east", web), f.serve(t, "west", web)
		want := wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP", "metrics:9090/TCP"}, endpoints: map[string][]string{"east": {eastIP}, "west": {westIP}}}
		for _, m := range []string{"east", "west", "north"} {
			f.waitImport(t, m, web, want)
		}
		after, _ := getImported(t.Context(), west, web)
		if after.si.UID != westBefore.si.UID || after.derived[0].UID != westBefore.derived[0].UID || !slices.Equal(after.si.Spec.IPs, westBefore.si.Spec.IPs) {
			t.Errorf("west's import or derived Service was replaced: UIDs %s→%s, %s→%s, ips %v→%v",
				westBefore.si.UID, after.si.UID, westBefore.derived[0].UID, after.derived[0].UID, westBefore.si.Spec.IPs, after.si.Spec.IPs)
		}
		// east lacks west's metrics port: KEP-1645 exposes the union and reports the
		// difference, on both exports.
		waitConflict(t, west, web, string(mcsv1beta1.ServiceExportReasonPortConflict))
		waitConflict(t, east, web, string(mcsv1beta1.ServiceExportReasonPortConflict))
	})

	t.Run("a port conflict: the oldest export's port wins; re-resolved when it goes", func(t *testing.T) {
		svc := &corev1.Service{}
		if err := west.Get(t.Context(), web, svc); err != nil {
			t.Fatal(err)
		}
		svc.Spec.Ports[0].Port = 8080 // http: 80 in east (older), 8080 in west
		if err := west.Update(t.Context(), svc); err != nil {
			t.Fatal(err)
		}
		eastIP, westIP := f.serve(t, "east", web), f.serve(t, "west", web)
		both := map[string][]string{"east": {eastIP}, "west": {westIP}}
		for _, m := range []string{"east", "west", "north"} {
			f.waitImport(t, m, web, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:80/TCP", "metrics:9090/TCP"}, endpoints: both})
		}
		// Strict port ownership: west's slices still name a port http (its 8080), but the
		// import's http is east's 80, so west's endpoints must not receive it; they keep
		// metrics, which only west exports.
		eventually(t, "http only on east's imported endpoints", func(ctx context.Context) string {
			im, err := getImported(ctx, north, web)
			if err != nil {
				return err.Error()
			}
			ports := map[string][]string{}
			for _, sl := range im.slices {
				for _, p := range sl.Ports {
					ports[sl.Labels[mcsv1beta1.LabelSourceCluster]] = append(ports[sl.Labels[mcsv1beta1.LabelSourceCluster]], ptr.Deref(p.Name, ""))
				}
			}
			if !slices.Contains(ports["east"], "http") || slices.Contains(ports["west"], "http") || !slices.Contains(ports["west"], "metrics") {
				return fmt.Sprintf("imported slice ports by cluster %v; want http from east only, metrics from west", ports)
			}
			return ""
		})
		// Both exports say so (KEP-1645: "set on all ServiceExports for the conflicted
		// service"), the older one too.
		waitConflict(t, west, web, string(mcsv1beta1.ServiceExportReasonPortConflict))
		waitConflict(t, east, web, string(mcsv1beta1.ServiceExportReasonPortConflict))

		// Unexporting in east withdraws its endpoints everywhere; west's export is now the
		// oldest, so its port wins.
		if err := east.Delete(t.Context(), export("shop", "web")); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"east", "west", "north"} {
			f.waitImport(t, m, web, wantImport{typ: mcsv1beta1.ClusterSetIP, ports: []string{"http:8080/TCP", "metrics:9090/TCP"}, endpoints: map[string][]string{"west": {westIP}}})
		}
		waitConflict(t, west, web, "NoConflicts")
		after, _ := getImported(t.Context(), west, web)
		if after.si.UID != westBefore.si.UID || after.derived[0].UID != westBefore.derived[0].UID {
			t.Errorf("west's import or derived Service was replaced")
		}
	})

	t.Run("the last unexport removes the import everywhere", func(t *testing.T) {
		if err := west.Delete(t.Context(), export("shop", "web")); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"east", "west", "north"} {
			f.waitNoImport(t, m, web)
		}
	})

	t.Run("headless: type Headless, pod addresses, no derived Service", func(t *testing.T) {
		db := types.NamespacedName{Namespace: "shop", Name: "db"}
		create(t, east,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Spec: corev1.ServiceSpec{
				ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
				Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}},
			}},
			export("shop", "db"))
		podNet := f.env.Cluster("east").PodCIDR.Addr()
		ip0, ip1 := podNet.Next().Next(), podNet.Next().Next().Next()
		runPod(t, east, "db-0", "db-0", ip0)
		runPod(t, east, "db-1", "", ip1)
		want := wantImport{typ: mcsv1beta1.Headless, ports: []string{"pg:5432/TCP"}, endpoints: map[string][]string{"east": {ip0.String(), ip1.String()}}}
		got := f.waitImport(t, "west", db, want)
		f.waitImport(t, "north", db, want)
		hostnames := map[string]string{}
		for _, s := range got.slices {
			for _, ep := range s.Endpoints {
				hostnames[ep.Addresses[0]] = ptr.Deref(ep.Hostname, "")
			}
		}
		// db-1 has no hostname: it travels without one, so that DNS names it by its dashed
		// address as the MCS DNS specification says, not by its pod name.
		if hostnames[ip0.String()] != "db-0" || hostnames[ip1.String()] != "" {
			t.Errorf("hostnames of the imported endpoints = %v", hostnames)
		}

		// A ClusterSetIP export of the same service from a younger export conflicts on type:
		// the import stays Headless without west's endpoints.
		create(t, west, clusterIPService("shop", "db", corev1.ServicePort{Name: "pg", Port: 5432}), export("shop", "db"))
		waitConflict(t, west, db, string(mcsv1beta1.ServiceExportReasonTypeConflict))
		f.waitImport(t, "north", db, want)
	})

	t.Run("an import removed by hand is put back", func(t *testing.T) {
		db := types.NamespacedName{Namespace: "shop", Name: "db"}
		if err := north.Delete(t.Context(), &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the import of shop/db back in north", func(ctx context.Context) string {
			si := &mcsv1beta1.ServiceImport{}
			if err := north.Get(ctx, db, si); err != nil {
				return err.Error()
			}
			if !si.DeletionTimestamp.IsZero() || len(si.Status.Clusters) != 1 {
				return fmt.Sprintf("import %+v", si.ObjectMeta)
			}
			return ""
		})
	})

	t.Run("the derived Service's name is readable and fits a DNS label", func(t *testing.T) {
		api := types.NamespacedName{Namespace: "shop", Name: "api"}
		got := struct{ name string }{}
		create(t, east, clusterIPService("shop", "api", corev1.ServicePort{Port: 443}), export("shop", "api"))
		eventually(t, "the derived Service of shop/api in west", func(ctx context.Context) string {
			im, err := getImported(ctx, west, api)
			if err != nil || len(im.derived) != 1 {
				return fmt.Sprintf("%d derived, %v", len(im.derived), err)
			}
			got.name = im.derived[0].Name
			return ""
		})
		if !strings.HasPrefix(got.name, "derived-api-") || len(got.name) > 63 {
			t.Errorf("derived Service name %q", got.name)
		}
	})
}

// TestConflictOnEveryExport checks each kind of conflict the KEP names: once a younger export
// conflicts with an older one, both exports carry Conflict=True with the same reason within
// conflictBound, and once the younger one is brought in line (or withdrawn, where the property
// cannot change), both are cleared within the same bound.
func TestConflictOnEveryExport(t *testing.T) {
	const conflictBound = 10 * time.Second
	f := newFabric(t, "east", "west")
	east, west := f.members["east"], f.members["west"]
	create(t, east, namespace("conf"))
	create(t, west, namespace("conf"))
	headless := func(name string) *corev1.Service {
		svc := clusterIPService("conf", name, corev1.ServicePort{Name: "http", Port: 80})
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		return svc
	}
	affinity := func(svc *corev1.Service) *corev1.Service {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		return svc
	}
	labelled := func(ex *mcsv1beta1.ServiceExport, labels, annotations map[string]string) *mcsv1beta1.ServiceExport {
		ex.Spec.ExportedLabels, ex.Spec.ExportedAnnotations = labels, annotations
		return ex
	}
	for _, tc := range []struct {
		name   string
		reason mcsv1beta1.ServiceExportConditionReason
		// older and younger are what east and west create; resolve brings west in line.
		older, younger []client.Object
		resolve        func(ctx context.Context, key types.NamespacedName) error
		// message holds what the condition's message must contain on both exports.
		message []string
	}{{
		name: "port sets", reason: mcsv1beta1.ServiceExportReasonPortConflict,
		older: []client.Object{clusterIPService("conf", "portsets",
			corev1.ServicePort{Name: "tcp", Port: 42, Protocol: corev1.ProtocolTCP}, corev1.ServicePort{Name: "udp", Port: 42, Protocol: corev1.ProtocolUDP}), export("conf", "portsets")},
		younger: []client.Object{clusterIPService("conf", "portsets",
			corev1.ServicePort{Name: "tcp", Port: 42, Protocol: corev1.ProtocolTCP}, corev1.ServicePort{Name: "stcp", Port: 142, Protocol: corev1.ProtocolSCTP}), export("conf", "portsets")},
		resolve: func(ctx context.Context, key types.NamespacedName) error {
			return update(ctx, west, key, func(svc *corev1.Service) {
				svc.Spec.Ports = []corev1.ServicePort{{Name: "tcp", Port: 42, Protocol: corev1.ProtocolTCP}, {Name: "udp", Port: 42, Protocol: corev1.ProtocolUDP}}
			})
		},
		message: []string{"cluster east: ports stcp:142/SCTP of cluster west", "cluster west: ports udp:42/UDP of cluster east"},
	}, {
		name: "ports", reason: mcsv1beta1.ServiceExportReasonPortConflict,
		older:   []client.Object{clusterIPService("conf", "ports", corev1.ServicePort{Name: "http", Port: 80}), export("conf", "ports")},
		younger: []client.Object{clusterIPService("conf", "ports", corev1.ServicePort{Name: "http", Port: 8080}), export("conf", "ports")},
		resolve: func(ctx context.Context, key types.NamespacedName) error {
			return update(ctx, west, key, func(svc *corev1.Service) { svc.Spec.Ports[0].Port = 80 })
		},
	}, {
		name: "type", reason: mcsv1beta1.ServiceExportReasonTypeConflict,
		older:   []client.Object{headless("type"), export("conf", "type")},
		younger: []client.Object{clusterIPService("conf", "type", corev1.ServicePort{Name: "http", Port: 80}), export("conf", "type")},
		// A Service cannot change between headless and ClusterIP: west stops exporting.
		resolve: func(ctx context.Context, key types.NamespacedName) error {
			return west.Delete(ctx, export(key.Namespace, key.Name))
		},
	}, {
		name: "session affinity", reason: mcsv1beta1.ServiceExportReasonSessionAffinityConflict,
		older:   []client.Object{clusterIPService("conf", "affinity", corev1.ServicePort{Name: "http", Port: 80}), export("conf", "affinity")},
		younger: []client.Object{affinity(clusterIPService("conf", "affinity", corev1.ServicePort{Name: "http", Port: 80})), export("conf", "affinity")},
		resolve: func(ctx context.Context, key types.NamespacedName) error {
			return update(ctx, west, key, func(svc *corev1.Service) {
				svc.Spec.SessionAffinity, svc.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
			})
		},
	}, {
		name: "labels", reason: mcsv1beta1.ServiceExportReasonLabelsConflict,
		older:   []client.Object{clusterIPService("conf", "labels", corev1.ServicePort{Name: "http", Port: 80}), labelled(export("conf", "labels"), map[string]string{"tier": "front"}, nil)},
		younger: []client.Object{clusterIPService("conf", "labels", corev1.ServicePort{Name: "http", Port: 80}), labelled(export("conf", "labels"), map[string]string{"tier": "back"}, nil)},
		resolve: func(ctx context.Context, key types.NamespacedName) error {
			return update(ctx, west, key, func(ex *mcsv1beta1.ServiceExport) { ex.Spec.ExportedLabels["tier"] = "front" })
		},
	}, {
		name: "annotations", reason: mcsv1beta1.ServiceExportReasonAnnotationsConflict,
		older:   []client.Object{clusterIPService("conf", "notes", corev1.ServicePort{Name: "http", Port: 80}), labelled(export("conf", "notes"), nil, map[string]string{"owner": "a"})},
		younger: []client.Object{clusterIPService("conf", "notes", corev1.ServicePort{Name: "http", Port: 80}), export("conf", "notes")},
		resolve: func(ctx context.Context, key types.NamespacedName) error {
			return update(ctx, west, key, func(ex *mcsv1beta1.ServiceExport) { ex.Spec.ExportedAnnotations = map[string]string{"owner": "a"} })
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			key := client.ObjectKeyFromObject(tc.older[0])
			create(t, east, tc.older...)
			waitConflict(t, east, key, "NoConflicts")
			changed := time.Now()
			create(t, west, tc.younger...)
			for _, c := range []client.Client{east, west} {
				cond := waitConflictWithin(t, c, key, string(tc.reason), changed, conflictBound)
				for _, m := range tc.message {
					if !strings.Contains(cond.Message, m) {
						t.Errorf("Conflict message %q does not contain %q", cond.Message, m)
					}
				}
			}
			t.Logf("Conflict=%s on both exports %s after the conflicting export", tc.reason, time.Since(changed).Round(time.Millisecond))

			changed = time.Now()
			if err := tc.resolve(t.Context(), key); err != nil {
				t.Fatal(err)
			}
			waitConflictWithin(t, east, key, "NoConflicts", changed, conflictBound)
			if err := west.Get(t.Context(), key, &mcsv1beta1.ServiceExport{}); err == nil {
				waitConflictWithin(t, west, key, "NoConflicts", changed, conflictBound)
			}
			t.Logf("cleared on every export %s after the fix", time.Since(changed).Round(time.Millisecond))
		})
	}
}

// waitConflictWithin is waitConflict with a deadline of bound after since.
func waitConflictWithin(t *testing.T, c client.Client, key types.NamespacedName, reason string, since time.Time, bound time.Duration) metav1.Condition {
	t.Helper()
	ctx, cancel := context.WithDeadline(t.Context(), since.Add(bound))
	defer cancel()
	var got metav1.Condition
	err := testenv.Poll(t, 100*time.Millisecond, time.Until(since.Add(bound)), func() error {
		ex := &mcsv1beta1.ServiceExport{}
		if err := c.Get(ctx, key, ex); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(ex.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
		switch {
		case cond == nil:
			return errors.New("no Conflict condition")
		case cond.Reason == reason && (cond.Status == metav1.ConditionTrue) == (reason != "NoConflicts"):
			got = *cond
			return nil
		}
		return fmt.Errorf("Conflict=%s %s: %s", cond.Status, cond.Reason, cond.Message)
	})
	if err != nil {
		t.Fatalf("ServiceExport %s: Conflict %s not within %s; last: %v", key, reason, bound, err)
	}
	return got
}

// update reads the object key of type T from c, changes it and writes it back.
func update[T any, PT interface {
	*T
	client.Object
}](ctx context.Context, c client.Client, key types.NamespacedName, change func(PT)) error {
	obj := PT(new(T))
	if err := c.Get(ctx, key, obj); err != nil {
		return err
	}
	change(obj)
	return c.Update(ctx, obj)
}

// propagationCount is how many propagations of cluster's exports the agents of this process
// measured.
func propagationCount(t *testing.T, cluster string) uint64 {
	t.Helper()
	return servicediscovery.ControllerMetric(t, "octopus_servicediscovery_propagation_seconds", "cluster", cluster).GetHistogram().GetSampleCount()
}
