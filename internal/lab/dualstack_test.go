package lab_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/verify"
)

// dsPod is an echo pod of checkDualStack with its address of each family.
type dsPod struct {
	cluster, name, node, netns string
	v4, v6                     netip.Addr
}

// addr is the pod's address of the family of v6.
func (p dsPod) addr(v6 bool) netip.Addr {
	if v6 {
		return p.v6
	}
	return p.v4
}

// checkDualStack checks, on a running dual-stack lab (Options.IPFamily dual) whose first two
// clusters are connected, issue 35's proofs across them: TCP pod → pod over IPv6 and over
// IPv4 both ways from every node, the server seeing the client pod's own address of that
// family; the Peers' connections carrying both families; a PreferDualStack Service exported
// from the first cluster imported into the second with a ClusterSet IP of each family, and
// reached over TCP at the IPv6 one; a dual-stack kube-dns; A and AAAA answers for its
// clusterset.local name over UDP from a pod's namespace to each of the cluster DNS's addresses,
// IPv4 and IPv6, equal to the ServiceImport's IPs; and
// `octopus verify` (binary octopus) checking the pair in each family.
func checkDualStack(ctx context.Context, t *testing.T, l *lab.Lab, octopus string) {
	c1, c2 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name
	pods := startDualStackPods(ctx, t, l, c1, c2)

	// The first request waits for the gateways to elect, publish and handshake.
	timeout := 90 * time.Second
	for _, v6 := range []bool{true, false} {
		for _, pair := range [][2]string{{c1, c2}, {c2, c1}} {
			for _, src := range pods[pair[0]] {
				for _, dst := range pods[pair[1]] {
					checkTCPFamily(t, src, dst, v6, timeout)
					timeout = 30 * time.Second
				}
			}
		}
	}

	hubc := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	for _, pair := range [][2]string{{c1, c2}, {c2, c1}} {
		waitFor(t, 60*time.Second, pair[0]+"'s Peer to carry IPv4 and IPv6 to "+pair[1], func() error {
			p := &v1alpha1.Peer{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: pair[0]}, p); err != nil {
				return err
			}
			for _, c := range p.Status.Connections {
				if c.ClusterID == pair[1] && slices.Equal(c.IPFamilies, []string{"IPv4", "IPv6"}) && c.FamilyMessage == "" &&
					c.State == v1alpha1.ConnectionConnected {
					t.Logf("Peer %s -> %s: %s, ipFamilies %v", pair[0], pair[1], c.State, c.IPFamilies)
					return nil
				}
			}
			return fmt.Errorf("connections %+v", p.Status.Connections)
		})
	}

	// A dual-stack Service exported from c1, its import in c2 with both families.
	const svcName = "ds-echo"
	cs1 := clientset(t, l.Env.Cluster(c1).Kubeconfig)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": svcName}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	created, err := cs1.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service %s in %s: %v", svcName, c1, err)
	}
	if len(created.Spec.ClusterIPs) != 2 {
		t.Fatalf("Service %s in %s has ClusterIPs %v, want one of each family (is the API server dual-stack?)", svcName, c1, created.Spec.ClusterIPs)
	}
	if err := kubeClient(t, l.Env.Cluster(c1).Kubeconfig).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: "default"}}); err != nil {
		t.Fatalf("exporting %s from %s: %v", svcName, c1, err)
	}
	var setIPs [2]netip.Addr // IPv4, IPv6
	ic := kubeClient(t, l.Env.Cluster(c2).Kubeconfig)
	waitFor(t, 90*time.Second, "the ServiceImport "+svcName+" in "+c2+" with IPs of both families", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := ic.Get(ctx, client.ObjectKey{Namespace: "default", Name: svcName}, si); err != nil {
			return err
		}
		fams := fmt.Sprint(si.Spec.IPFamilies)
		if len(si.Spec.IPs) != 2 || fams != "[IPv4 IPv6]" && fams != "[IPv6 IPv4]" {
			return fmt.Errorf("ips %v, ipFamilies %v", si.Spec.IPs, si.Spec.IPFamilies)
		}
		for _, s := range si.Spec.IPs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return err
			}
			setIPs[map[bool]int{true: 0, false: 1}[a.Is4()]] = a
		}
		if !setIPs[0].Is4() || !setIPs[1].Is6() {
			return fmt.Errorf("ips %v: want one of each family", si.Spec.IPs)
		}
		t.Logf("ServiceImport %s in %s: ips %v, ipFamilies %v", svcName, c2, si.Spec.IPs, si.Spec.IPFamilies)
		return nil
	})
	for _, src := range pods[c2] {
		checkServiceTCP(t, src, netip.AddrPortFrom(setIPs[1], 80), c1, true)
	}

	// DNS over UDP from a pod of c2 to its cluster DNS (CoreDNS, forwarding clusterset.local
	// to octopus-dns) at its address of each family (kube-dns is dual-stack, as a dual-stack
	// kubeadm cluster's): A and AAAA are the ClusterSet IPs.
	cp2 := l.Env.Cluster(c2)
	dnsIPs := checkDualStackClusterDNS(ctx, t, c2, clientset(t, cp2.Kubeconfig), cp2.ServiceCIDR, cp2.SecondaryServiceCIDR)
	name := svcName + ".default.svc.clusterset.local."
	for _, dnsIP := range dnsIPs {
		dnsAddr := netip.AddrPortFrom(dnsIP, 53)
		for i, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
			waitFor(t, 60*time.Second, fmt.Sprintf("%s %s from %s via %s", dns.TypeToString[qtype], name, pods[c2][0].name, dnsAddr), func() error {
				got, err := queryFromNetns(pods[c2][0].netns, dnsAddr, name, qtype)
				if err != nil {
					return err
				}
				if !slices.Equal(got, []netip.Addr{setIPs[i]}) {
					return fmt.Errorf("answer %v, want %s", got, setIPs[i])
				}
				t.Logf("DNS %s %s = %s (UDP from %s to %s)", dns.TypeToString[qtype], name, got[0], pods[c2][0].name, dnsAddr)
				return nil
			})
		}
	}

	// verify checks the dual-stack pair in each family: 3 checks x 2 families x 2 directions.
	report, err := runVerify(ctx, t, l, octopus, 2*time.Minute)
	var names []string
	for _, r := range report.Results {
		names = append(names, r.Name())
	}
	want := []string{}
	for _, pair := range [][2]string{{c1, c2}, {c2, c1}} {
		for _, fam := range []string{"IPv4", "IPv6"} {
			for _, c := range []string{"pod-to-pod", "clusterset-ip", "dns"} {
				want = append(want, fmt.Sprintf("%s/%s %s->%s", c, fam, pair[0], pair[1]))
			}
		}
	}
	if err != nil || !report.Passed || !slices.Equal(names, want) {
		t.Fatalf("verify on the dual-stack lab: %v, passed %v, checks %v; want %v all passing", err, report.Passed, names, want)
	}
	t.Logf("verify: %s", report.Summary())
}

// checkDualStackClusterDNS checks that cluster's kube-dns Service is dual-stack, at the 10th
// address of each of its service CIDRs (the primary family's first, as the kubelets' clusterDNS
// lists them), and returns those addresses.
func checkDualStackClusterDNS(ctx context.Context, t *testing.T, cluster string, cs kubernetes.Interface, serviceCIDRs ...netip.Prefix) []netip.Addr {
	t.Helper()
	want, err := lab.ClusterDNSAddrs(serviceCIDRs...)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading kube-dns in %s: %v", cluster, err)
	}
	var got []netip.Addr
	for _, ip := range svc.Spec.ClusterIPs {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			t.Fatalf("kube-dns in %s: clusterIP %q: %v", cluster, ip, err)
		}
		got = append(got, a)
	}
	if len(want) != 2 || !slices.Equal(got, want) || ptr.Deref(svc.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicyRequireDualStack {
		t.Fatalf("kube-dns in %s: clusterIPs %v, ipFamilyPolicy %v; want %v, RequireDualStack", cluster, got, ptr.Deref(svc.Spec.IPFamilyPolicy, ""), want)
	}
	t.Logf("kube-dns in %s: clusterIPs %v", cluster, got)
	return got
}

// startDualStackPods runs an echo pod (label app=ds-echo) on every node of the clusters and
// returns them, Ready and with an address of each family, by cluster.
func startDualStackPods(ctx context.Context, t *testing.T, l *lab.Lab, clusters ...string) map[string][]dsPod {
	t.Helper()
	pods := map[string][]dsPod{}
	for _, name := range clusters {
		c := l.Network.Cluster(name)
		cs := clientset(t, l.Env.Cluster(name).Kubeconfig)
		for _, n := range c.Nodes {
			p := echoPod("ds-echo-"+n.Name, n.Name, name)
			p.Labels = map[string]string{"app": "ds-echo"}
			create(ctx, t, cs, p)
		}
		for _, n := range c.Nodes {
			p := waitPodReady(ctx, t, cs, "ds-echo-"+n.Name)
			dp := dsPod{cluster: name, name: p.Name, node: n.Name, netns: podNetns(t, l.Network.ID, p)}
			for _, ip := range p.Status.PodIPs {
				a, err := netip.ParseAddr(ip.IP)
				switch {
				case err != nil:
					t.Fatalf("pod %s: IP %q: %v", p.Name, ip.IP, err)
				case a.Is4():
					dp.v4 = a
				default:
					dp.v6 = a
				}
			}
			if !dp.v4.IsValid() || !dp.v6.IsValid() || !labnet.IPv6Range.Contains(dp.v6) {
				t.Fatalf("pod %s on %s has podIPs %v: want an IPv4 and an IPv6 address (in %s)", p.Name, n.Name, p.Status.PodIPs, labnet.IPv6Range)
			}
			pods[name] = append(pods[name], dp)
		}
	}
	return pods
}

// clientField is how the echo server writes a client address of a's family (Go's RemoteAddr:
// IPv6 in brackets), up to the port.
func clientField(a netip.Addr) string {
	if a.Is6() {
		return "client=[" + a.String() + "]:"
	}
	return "client=" + a.String() + ":"
}

// checkTCPFamily requests dst's echo server at its address of one family from src until it
// answers naming dst and seeing src's own address of that family, or timeout passes.
func checkTCPFamily(t *testing.T, src, dst dsPod, v6 bool, timeout time.Duration) {
	t.Helper()
	fam := map[bool]string{true: "IPv6", false: "IPv4"}[v6]
	want := fmt.Sprintf("cluster=%s node=%s pod=%s", dst.cluster, dst.node, dst.name)
	to := netip.AddrPortFrom(dst.addr(v6), 8080)
	var got string
	var err error
	deadline := time.Now().Add(timeout)
	for {
		got, err = tryHTTPGet(src.netns, to)
		if err == nil && strings.HasPrefix(got, want) && strings.Contains(got, clientField(src.addr(v6))) {
			t.Logf("pod -> pod over %s: %s -> %s: %s", fam, src.name, to, got)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod -> pod over %s: %s (%s) -> %s: answer %q, error %v; want %q from client %s",
				fam, src.name, src.cluster, to, got, err, want, src.addr(v6))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkServiceTCP requests an exported service at addr from src until a pod of cluster
// answers seeing src's own address of addr's family.
func checkServiceTCP(t *testing.T, src dsPod, addr netip.AddrPort, cluster string, v6 bool) {
	t.Helper()
	var got string
	var err error
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err = tryHTTPGet(src.netns, addr)
		if err == nil && strings.HasPrefix(got, "cluster="+cluster+" ") && strings.Contains(got, clientField(src.addr(v6))) {
			t.Logf("pod -> ClusterSet IP: %s -> %s: %s", src.name, addr, got)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod -> ClusterSet IP: %s -> %s: answer %q, error %v; want one from %s seeing %s", src.name, addr, got, err, cluster, src.addr(v6))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// queryFromNetns asks server for name's records of qtype over UDP from inside the network
// namespace netns and returns the addresses of the A or AAAA answers.
func queryFromNetns(netns string, server netip.AddrPort, name string, qtype uint16) ([]netip.Addr, error) {
	var conn net.Conn
	err := labnet.InNamespace(netns, func() error {
		var err error
		conn, err = net.DialTimeout("udp", server.String(), 3*time.Second)
		return err
	})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	r, _, err := c.ExchangeWithConn(m, &dns.Conn{Conn: conn})
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	var addrs []netip.Addr
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			a, _ := netip.AddrFromSlice(rr.A.To4())
			addrs = append(addrs, a)
		case *dns.AAAA:
			a, _ := netip.AddrFromSlice(rr.AAAA)
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// checkMixedFamilies checks, on a running lab whose cluster dual is dual-stack and cluster v4
// IPv4-only (Options.IPv4Clusters), what issue 35 asks of a mixed cluster set: each side's Peer
// connection carries IPv4 alone and says why not IPv6; a PreferDualStack Service exported
// from dual (a ClusterIP of each family there) is imported into v4 with an IPv4 ClusterSet IP
// only and reached at it over TCP; its clusterset.local name answers A with that address and
// AAAA with no record (NOERROR, not an error) at v4's cluster DNS; and verify's report
// says, per direction, that IPv6 was not checked.
func checkMixedFamilies(ctx context.Context, t *testing.T, l *lab.Lab, dual, v4 string, report *verify.Report) {
	hubc := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	for _, pair := range [][2]string{{dual, v4}, {v4, dual}} {
		waitFor(t, 60*time.Second, pair[0]+"'s Peer to carry IPv4 alone to "+pair[1]+", saying why", func() error {
			p := &v1alpha1.Peer{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: pair[0]}, p); err != nil {
				return err
			}
			for _, c := range p.Status.Connections {
				if c.ClusterID == pair[1] && slices.Equal(c.IPFamilies, []string{"IPv4"}) &&
					strings.Contains(c.FamilyMessage, "IPv6 is not offered between "+pair[0]+" and "+pair[1]) {
					t.Logf("Peer %s -> %s: ipFamilies %v: %s", pair[0], pair[1], c.IPFamilies, c.FamilyMessage)
					return nil
				}
			}
			return fmt.Errorf("connections %+v", p.Status.Connections)
		})
	}
	for _, pair := range [][2]string{{dual, v4}, {v4, dual}} {
		want := "IPv6 not checked from " + pair[0] + " to " + pair[1]
		if !slices.ContainsFunc(report.Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("verify's notes %q: want one starting %q", report.Notes, want)
		}
	}

	// A dual-stack Service of dual, served by a pod on its last node, imported into v4.
	const svcName = "mixed-echo"
	csDual, csV4 := clientset(t, l.Env.Cluster(dual).Kubeconfig), clientset(t, l.Env.Cluster(v4).Kubeconfig)
	dualNodes, v4Nodes := l.Network.Cluster(dual).Nodes, l.Network.Cluster(v4).Nodes
	server := echoPod(svcName, dualNodes[len(dualNodes)-1].Name, dual)
	server.Labels = map[string]string{"app": svcName}
	create(ctx, t, csDual, server)
	clientPod := echoPod(svcName+"-client", v4Nodes[len(v4Nodes)-1].Name, v4)
	clientPod.Labels = map[string]string{"app": svcName + "-client"}
	create(ctx, t, csV4, clientPod)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": svcName}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	created, err := csDual.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service %s in %s: %v", svcName, dual, err)
	}
	if len(created.Spec.ClusterIPs) != 2 {
		t.Fatalf("Service %s in %s has ClusterIPs %v, want one of each family (is %s dual-stack?)", svcName, dual, created.Spec.ClusterIPs, dual)
	}
	if err := kubeClient(t, l.Env.Cluster(dual).Kubeconfig).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: "default"}}); err != nil {
		t.Fatalf("exporting %s from %s: %v", svcName, dual, err)
	}
	waitPodReady(ctx, t, csDual, svcName)
	cp := waitPodReady(ctx, t, csV4, svcName+"-client")
	netns := podNetns(t, l.Network.ID, cp)

	var setIP netip.Addr
	ic := kubeClient(t, l.Env.Cluster(v4).Kubeconfig)
	waitFor(t, 90*time.Second, "the ServiceImport "+svcName+" in "+v4+" with an IPv4 address only", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := ic.Get(ctx, client.ObjectKey{Namespace: "default", Name: svcName}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) != 1 || !slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
			return fmt.Errorf("ips %v, ipFamilies %v", si.Spec.IPs, si.Spec.IPFamilies)
		}
		a, err := netip.ParseAddr(si.Spec.IPs[0])
		if err != nil || !a.Is4() {
			return fmt.Errorf("ips %v: want one IPv4 address", si.Spec.IPs)
		}
		setIP = a
		t.Logf("ServiceImport %s in %s: ips %v, ipFamilies %v", svcName, v4, si.Spec.IPs, si.Spec.IPFamilies)
		return nil
	})
	addr := netip.AddrPortFrom(setIP, 80)
	waitFor(t, 60*time.Second, "an answer from "+dual+" at "+addr.String()+" in "+v4, func() error {
		got, err := tryHTTPGet(netns, addr)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(got, "cluster="+dual+" ") {
			return fmt.Errorf("answer %q", got)
		}
		t.Logf("pod -> ClusterSet IP in a mixed pair: %s -> %s: %s", cp.Name, addr, got)
		return nil
	})

	dnsAddr := netip.AddrPortFrom(clusterDNS(t, l.Env.Cluster(v4).ServiceCIDR), 53)
	name := svcName + ".default.svc.clusterset.local."
	for _, q := range []struct {
		qtype uint16
		want  []netip.Addr
	}{{dns.TypeA, []netip.Addr{setIP}}, {dns.TypeAAAA, nil}} {
		waitFor(t, 60*time.Second, fmt.Sprintf("%s %s via %s", dns.TypeToString[q.qtype], name, dnsAddr), func() error {
			got, err := queryFromNetns(netns, dnsAddr, name, q.qtype)
			if err != nil {
				return err
			}
			if !slices.Equal(got, q.want) {
				return fmt.Errorf("answer %v, want %v", got, q.want)
			}
			t.Logf("DNS %s %s in %s: NOERROR %v", dns.TypeToString[q.qtype], name, v4, got)
			return nil
		})
	}
}
