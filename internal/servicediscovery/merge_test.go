package servicediscovery

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// rec is an export of cluster, created minutes after t0 (negative: no creation time).
func rec(cluster string, minutes int, typ mcsv1beta1.ServiceImportType, ports ...mcsv1beta1.ServicePort) exportRecord {
	r := exportRecord{Cluster: cluster, Spec: mcsv1beta1.ServiceImportSpec{Type: typ, Ports: ports}}
	if minutes >= 0 {
		r.Created = t0.Add(time.Duration(minutes) * time.Minute)
	}
	return r
}

func sport(name string, number int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Port: number, Protocol: corev1.ProtocolTCP}
}

func udp(p mcsv1beta1.ServicePort) mcsv1beta1.ServicePort {
	p.Protocol = corev1.ProtocolUDP
	return p
}

func sctp(p mcsv1beta1.ServicePort) mcsv1beta1.ServicePort {
	p.Protocol = corev1.ProtocolSCTP
	return p
}

func affinity(r exportRecord, a corev1.ServiceAffinity, timeout int32) exportRecord {
	r.Spec.SessionAffinity = a
	if timeout > 0 {
		r.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(timeout)}}
	}
	return r
}

func TestMerge(t *testing.T) {
	const csip, headless = mcsv1beta1.ClusterSetIP, mcsv1beta1.Headless
	for _, tc := range []struct {
		name     string
		records  []exportRecord
		typ      mcsv1beta1.ServiceImportType
		ports    []mcsv1beta1.ServicePort
		clusters []string
		// conflicts maps clusters to their conflict reasons.
		conflicts map[string][]mcsv1beta1.ServiceExportConditionReason
		affinity  corev1.ServiceAffinity
	}{{
		name:     "one export",
		records:  []exportRecord{rec("east", 0, csip, sport("http", 80))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("http", 80)},
		clusters: []string{"east"},
	}, {
		name:     "identical exports",
		records:  []exportRecord{rec("west", 5, csip, sport("http", 80)), rec("east", 0, csip, sport("http", 80))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("http", 80)},
		clusters: []string{"east", "west"},
	}, {
		name:     "union of ports, the oldest's first; the difference conflicts on both",
		records:  []exportRecord{rec("west", 5, csip, sport("http", 80), sport("metrics", 9090)), rec("east", 0, csip, sport("http", 80), sport("grpc", 9000))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("http", 80), sport("grpc", 9000), sport("metrics", 9090)},
		clusters: []string{"east", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{
			"east": {mcsv1beta1.ServiceExportReasonPortConflict},
			"west": {mcsv1beta1.ServiceExportReasonPortConflict},
		},
	}, {
		name:     "the issue's port sets: tcp+udp/42 against tcp/42+sctp/142",
		records:  []exportRecord{rec("cluster2", 5, csip, sport("tcp", 42), sctp(sport("stcp", 142))), rec("cluster1", 0, csip, sport("tcp", 42), udp(sport("udp", 42)))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("tcp", 42), udp(sport("udp", 42)), sctp(sport("stcp", 142))},
		clusters: []string{"cluster1", "cluster2"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{
			"cluster1": {mcsv1beta1.ServiceExportReasonPortConflict},
			"cluster2": {mcsv1beta1.ServiceExportReasonPortConflict},
		},
	}, {
		name:     "a subset conflicts, the superset does not lack anything",
		records:  []exportRecord{rec("east", 0, csip, sport("http", 80)), rec("west", 5, csip, sport("http", 80), sport("metrics", 9090))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("http", 80), sport("metrics", 9090)},
		clusters: []string{"east", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{
			"east": {mcsv1beta1.ServiceExportReasonPortConflict},
		},
	}, {
		name:     "same port sets in another order: no conflict",
		records:  []exportRecord{rec("east", 0, csip, sport("http", 80), udp(sport("dns", 53))), rec("west", 5, csip, udp(sport("dns", 53)), sport("http", 80))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("http", 80), udp(sport("dns", 53))},
		clusters: []string{"east", "west"},
	}, {
		name:     "same name, other number: the oldest wins; metrics is missing from east",
		records:  []exportRecord{rec("west", 5, csip, sport("http", 8080), sport("metrics", 9090)), rec("east", 0, csip, sport("http", 80))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("http", 80), sport("metrics", 9090)},
		clusters: []string{"east", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{
			"east": {mcsv1beta1.ServiceExportReasonPortConflict},
			"west": {mcsv1beta1.ServiceExportReasonPortConflict},
		},
	}, {
		name:      "same name, other protocol: the oldest wins",
		records:   []exportRecord{rec("west", 5, csip, udp(sport("dns", 53))), rec("east", 0, csip, sport("dns", 53))},
		typ:       csip,
		ports:     []mcsv1beta1.ServicePort{sport("dns", 53)},
		clusters:  []string{"east", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{"west": {mcsv1beta1.ServiceExportReasonPortConflict}},
	}, {
		name:      "same name, other appProtocol: the oldest wins",
		records:   []exportRecord{rec("east", 0, csip, sport("web", 80)), rec("west", 5, csip, mcsv1beta1.ServicePort{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http")})},
		typ:       csip,
		ports:     []mcsv1beta1.ServicePort{sport("web", 80)},
		clusters:  []string{"east", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{"west": {mcsv1beta1.ServiceExportReasonPortConflict}},
	}, {
		name:      "same number and protocol under another name: the oldest wins",
		records:   []exportRecord{rec("east", 0, csip, sport("http", 80)), rec("west", 5, csip, sport("web", 80))},
		typ:       csip,
		ports:     []mcsv1beta1.ServicePort{sport("http", 80)},
		clusters:  []string{"east", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{"west": {mcsv1beta1.ServiceExportReasonPortConflict}},
	}, {
		name:     "same number, other protocol: both, and each lacks the other's",
		records:  []exportRecord{rec("east", 0, csip, sport("dns-tcp", 53)), rec("west", 5, csip, udp(sport("dns-udp", 53)))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("dns-tcp", 53), udp(sport("dns-udp", 53))},
		clusters: []string{"east", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{
			"east": {mcsv1beta1.ServiceExportReasonPortConflict},
			"west": {mcsv1beta1.ServiceExportReasonPortConflict},
		},
	}, {
		name:     "an empty protocol means TCP",
		records:  []exportRecord{rec("east", 0, csip, mcsv1beta1.ServicePort{Name: "http", Port: 80}), rec("west", 5, csip, sport("http", 80))},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("http", 80)},
		clusters: []string{"east", "west"},
	}, {
		name:      "re-resolved when the oldest export goes: west's port now",
		records:   []exportRecord{rec("west", 5, csip, sport("http", 8080), sport("metrics", 9090))},
		typ:       csip,
		ports:     []mcsv1beta1.ServicePort{sport("http", 8080), sport("metrics", 9090)},
		clusters:  []string{"west"},
		conflicts: nil,
	}, {
		name:      "equal creation times: the lower cluster ID is older",
		records:   []exportRecord{rec("west", 0, csip, sport("http", 8080)), rec("east", 0, csip, sport("http", 80))},
		typ:       csip,
		ports:     []mcsv1beta1.ServicePort{sport("http", 80)},
		clusters:  []string{"east", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{"west": {mcsv1beta1.ServiceExportReasonPortConflict}},
	}, {
		name:      "no creation time loses to any",
		records:   []exportRecord{rec("a", -1, csip, sport("http", 8080)), rec("z", 500, csip, sport("http", 80))},
		typ:       csip,
		ports:     []mcsv1beta1.ServicePort{sport("http", 80)},
		clusters:  []string{"a", "z"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{"a": {mcsv1beta1.ServiceExportReasonPortConflict}},
	}, {
		name:      "type conflict, headless oldest: the ClusterSetIP export is left out",
		records:   []exportRecord{rec("east", 0, headless, sport("pg", 5432)), rec("west", 5, csip, sport("pg", 5432), sport("admin", 8080))},
		typ:       headless,
		ports:     []mcsv1beta1.ServicePort{sport("pg", 5432)},
		clusters:  []string{"east"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{"west": {mcsv1beta1.ServiceExportReasonTypeConflict}},
	}, {
		name:      "type conflict, ClusterSetIP oldest",
		records:   []exportRecord{rec("east", 5, headless, sport("pg", 5432)), rec("west", 0, csip, sport("pg", 5432)), rec("north", 9, csip, sport("pg", 5432))},
		typ:       csip,
		ports:     []mcsv1beta1.ServicePort{sport("pg", 5432)},
		clusters:  []string{"north", "west"},
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{"east": {mcsv1beta1.ServiceExportReasonTypeConflict}},
	}, {
		name:     "session affinity of the oldest",
		records:  []exportRecord{affinity(rec("east", 0, csip, sport("http", 80)), corev1.ServiceAffinityClientIP, 60), affinity(rec("west", 5, csip, sport("http", 80)), corev1.ServiceAffinityNone, 0), affinity(rec("north", 7, csip, sport("http", 80)), corev1.ServiceAffinityClientIP, 30)},
		typ:      csip,
		ports:    []mcsv1beta1.ServicePort{sport("http", 80)},
		clusters: []string{"east", "north", "west"},
		affinity: corev1.ServiceAffinityClientIP,
		conflicts: map[string][]mcsv1beta1.ServiceExportConditionReason{
			"west":  {mcsv1beta1.ServiceExportReasonSessionAffinityConflict},
			"north": {mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			// Any order of the records gives the same result.
			for range 5 {
				records := slices.Clone(tc.records)
				rand.Shuffle(len(records), func(i, j int) { records[i], records[j] = records[j], records[i] })
				m := merge(records)
				if m.Spec.Type != tc.typ || !equalJSON(t, m.Spec.Ports, tc.ports) || !slices.Equal(m.Clusters, tc.clusters) {
					t.Fatalf("merge = type %s, ports %s, clusters %v; want %s, %s, %v", m.Spec.Type, toJSON(t, m.Spec.Ports), m.Clusters, tc.typ, toJSON(t, tc.ports), tc.clusters)
				}
				if tc.affinity != "" && m.Spec.SessionAffinity != tc.affinity {
					t.Errorf("session affinity %s, want %s", m.Spec.SessionAffinity, tc.affinity)
				}
				got := map[string][]mcsv1beta1.ServiceExportConditionReason{}
				for c, cs := range m.Conflicts {
					for _, x := range cs {
						got[c] = append(got[c], x.Reason)
						if x.Message == "" {
							t.Errorf("conflict of %s without a message", c)
						}
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(orEmpty(tc.conflicts)) {
					t.Fatalf("conflicts = %v, want %v (%+v)", got, tc.conflicts, m.Conflicts)
				}
			}
		})
	}
}

func orEmpty(m map[string][]mcsv1beta1.ServiceExportConditionReason) map[string][]mcsv1beta1.ServiceExportConditionReason {
	if m == nil {
		return map[string][]mcsv1beta1.ServiceExportConditionReason{}
	}
	return m
}

func TestMergeLabelsAndAnnotations(t *testing.T) {
	east, west := rec("east", 0, mcsv1beta1.ClusterSetIP), rec("west", 1, mcsv1beta1.ClusterSetIP)
	east.Labels, west.Labels = map[string]string{"tier": "front"}, map[string]string{"tier": "back"}
	west.Annotations = map[string]string{"owner": "b"}
	m := merge([]exportRecord{west, east})
	if m.Labels["tier"] != "front" || len(m.Annotations) != 0 {
		t.Errorf("labels %v, annotations %v: want the oldest export's", m.Labels, m.Annotations)
	}
	var reasons []mcsv1beta1.ServiceExportConditionReason
	for _, c := range m.Conflicts["west"] {
		reasons = append(reasons, c.Reason)
	}
	if !slices.Equal(reasons, []mcsv1beta1.ServiceExportConditionReason{mcsv1beta1.ServiceExportReasonLabelsConflict, mcsv1beta1.ServiceExportReasonAnnotationsConflict}) {
		t.Errorf("west's conflicts = %v", reasons)
	}
	if m := merge(nil); m.Spec.Type != "" || m.Clusters != nil {
		t.Errorf("merge(nil) = %+v", m)
	}
}

func TestParseRecord(t *testing.T) {
	r := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{mcsv1beta1.LabelSourceCluster: "east"},
			Annotations: map[string]string{
				v1alpha1.ExportCreatedAnnotation:       "2025-01-01T00:00:00Z",
				v1alpha1.ExportedLabelsAnnotation:      `{"tier":"front"}`,
				v1alpha1.ExportedAnnotationsAnnotation: `not json`,
			},
		},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless},
	}
	got := parseRecord(r)
	if got.Cluster != "east" || !got.Created.Equal(t0) || got.Labels["tier"] != "front" || len(got.Annotations) != 0 || got.Spec.Type != mcsv1beta1.Headless {
		t.Errorf("parseRecord = %+v", got)
	}
	r.Annotations[v1alpha1.ExportCreatedAnnotation] = "yesterday"
	if got := parseRecord(r); !got.Created.IsZero() {
		t.Errorf("a bad creation time parsed as %v", got.Created)
	}
}

func TestDerivedServiceName(t *testing.T) {
	long := types.NamespacedName{Namespace: "ns", Name: "a-very-long-service-name-that-fills-almost-all-of-the-63-chars"}
	for _, key := range []types.NamespacedName{{Namespace: "shop", Name: "web"}, long} {
		n := derivedServiceName(key)
		if len(n) > 63 || n[:len("derived-")] != "derived-" {
			t.Errorf("derivedServiceName(%s) = %q", key, n)
		}
	}
	if derivedServiceName(types.NamespacedName{Namespace: "a", Name: "web"}) == derivedServiceName(types.NamespacedName{Namespace: "b", Name: "web"}) {
		t.Error("derived names of the same service in two namespaces are equal: the hash must cover the namespace")
	}
	if got := derivedServiceName(types.NamespacedName{Namespace: "shop", Name: "web"}); got != "derived-web-"+got[len(got)-derivedHashLength:] {
		t.Errorf("derived name %q is not derived-<svc>-<hash>", got)
	}
}

// TestConflictCondition checks that every exporter of a conflicted service gets the same
// condition, naming each losing cluster, the oldest exporter included.
func TestConflictCondition(t *testing.T) {
	east := rec("east", 0, mcsv1beta1.ClusterSetIP, sport("http", 80))
	west := rec("west", 1, mcsv1beta1.ClusterSetIP, sport("http", 8080))
	north := affinity(rec("north", 2, mcsv1beta1.ClusterSetIP, sport("http", 80)), corev1.ServiceAffinityClientIP, 60)
	south := rec("south", 3, mcsv1beta1.Headless, sport("http", 80))
	for _, tc := range []struct {
		name       string
		records    []exportRecord
		status     metav1.ConditionStatus
		reason     string
		msgContain []string
	}{{
		name: "no conflict", records: []exportRecord{east, rec("west", 1, mcsv1beta1.ClusterSetIP, sport("http", 80))},
		status: metav1.ConditionFalse, reason: "NoConflicts", msgContain: []string{"2 export(s)"},
	}, {
		name: "a port conflict names the loser, the port and the owner", records: []exportRecord{west, east},
		status: metav1.ConditionTrue, reason: "PortConflict",
		msgContain: []string{"cluster west: ports http:8080/TCP (name taken by http:80/TCP of cluster east)"},
	}, {
		name: "different port sets: every export names what it lacks and whose it is",
		records: []exportRecord{
			rec("cluster1", 0, mcsv1beta1.ClusterSetIP, sport("tcp", 42), udp(sport("udp", 42))),
			rec("cluster2", 1, mcsv1beta1.ClusterSetIP, sport("tcp", 42), sctp(sport("stcp", 142))),
		},
		status: metav1.ConditionTrue, reason: "PortConflict",
		msgContain: []string{
			"cluster cluster1: ports stcp:142/SCTP of cluster cluster2 are not in this cluster's export",
			"cluster cluster2: ports udp:42/UDP of cluster cluster1 are not in this cluster's export",
		},
	}, {
		name: "several losers and kinds: reasons once each, in the losers' order", records: []exportRecord{south, north, west, east},
		status: metav1.ConditionTrue, reason: "SessionAffinityConflict,TypeConflict,PortConflict",
		msgContain: []string{"cluster north: session affinity", "cluster south: type Headless", "cluster west: ports http:8080/TCP"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := conflictCondition(merge(tc.records).Conflicts, len(tc.records))
			// Every exporter computes the condition from the same records in its own order.
			shuffled := slices.Clone(tc.records)
			rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if again := conflictCondition(merge(shuffled).Conflicts, len(shuffled)); again != got {
				t.Errorf("condition depends on record order:\n%+v\n%+v", got, again)
			}
			if got.Type != string(mcsv1beta1.ServiceExportConditionConflict) || got.Status != tc.status || got.Reason != tc.reason {
				t.Errorf("condition %s=%s (%s), want %s (%s)", got.Type, got.Status, got.Reason, tc.status, tc.reason)
			}
			for _, m := range tc.msgContain {
				if !strings.Contains(got.Message, m) {
					t.Errorf("message %q does not contain %q", got.Message, m)
				}
			}
		})
	}
}

// TestOwnedPorts checks strict port ownership: the traffic of an imported port goes only to
// the clusters whose export has that very port, however the losers' slices name their ports.
func TestOwnedPorts(t *testing.T) {
	const csip = mcsv1beta1.ClusterSetIP
	// cluster1 exports tcp:42 first; cluster2 later exports tcp:4242 (targetPort 42, so its
	// slices carry a port named tcp numbered 42) and udp:53, which is its alone; cluster3
	// agrees with cluster1 on tcp.
	m := merge([]exportRecord{
		rec("cluster2", 5, csip, sport("tcp", 4242), udp(sport("dns", 53))),
		rec("cluster1", 0, csip, sport("tcp", 42)),
		rec("cluster3", 9, csip, sport("tcp", 42)),
	})
	if got := fmt.Sprint(m.PortClusters); got != "map[dns:[cluster2] tcp:[cluster1 cluster3]]" {
		t.Errorf("PortClusters = %s", got)
	}
	slicePorts := []discoveryv1.EndpointPort{
		{Name: ptr.To("tcp"), Port: ptr.To[int32](42), Protocol: ptr.To(corev1.ProtocolTCP)},
		{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
	}
	for _, tc := range []struct {
		cluster string
		ports   []discoveryv1.EndpointPort
		want    []string
		ok      bool
	}{
		{"cluster1", slicePorts[:1], []string{"tcp"}, true},
		{"cluster3", slicePorts[:1], []string{"tcp"}, true},
		{"cluster2", slicePorts, []string{"dns"}, true}, // its tcp lost: only dns
		{"cluster2", slicePorts[:1], nil, false},        // nothing of this slice is its own
		{"cluster1", nil, nil, true},                    // a slice without ports stays as it is
		{"cluster9", slicePorts, nil, false},            // not an exporter at all
	} {
		got, ok := m.ownedPorts(tc.cluster, tc.ports)
		var names []string
		for _, p := range got {
			names = append(names, *p.Name)
		}
		if ok != tc.ok || !slices.Equal(names, tc.want) {
			t.Errorf("ownedPorts(%s, %d ports) = %v, %v; want %v, %v", tc.cluster, len(tc.ports), names, ok, tc.want, tc.ok)
		}
	}
}
