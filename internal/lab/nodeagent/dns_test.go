package nodeagent

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestClusterDNSAddr(t *testing.T) {
	for _, tc := range []struct{ cidr, want string }{
		{"10.96.0.0/12", "10.96.0.10"},
		{"10.97.0.0/16", "10.97.0.10"},
		{"10.0.0.0/29", ""}, // too small
	} {
		got, err := ClusterDNSAddr(netip.MustParsePrefix(tc.cidr))
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s: got %s, want an error", tc.cidr, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("%s: got %s, %v; want %s", tc.cidr, got, err, tc.want)
		}
	}
}

func TestResolvConf(t *testing.T) {
	dns := netip.MustParseAddr("10.97.0.10")
	pod := func(policy corev1.DNSPolicy, hostNet bool, cfg *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns1"},
			Spec: corev1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: cfg}}
	}
	cluster := "search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.97.0.10\noptions ndots:5\n"
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string // "" for the node's file
	}{
		{"ClusterFirst", pod(corev1.DNSClusterFirst, false, nil), cluster},
		{"empty policy is ClusterFirst", pod("", false, nil), cluster},
		{"hostNetwork ClusterFirst keeps the node's", pod(corev1.DNSClusterFirst, true, nil), ""},
		{"ClusterFirstWithHostNet", pod(corev1.DNSClusterFirstWithHostNet, true, nil), cluster},
		{"Default keeps the node's", pod(corev1.DNSDefault, false, nil), ""},
		{"dnsConfig merged", pod(corev1.DNSClusterFirst, false, &corev1.PodDNSConfig{
			Nameservers: []string{"203.0.113.53"}, Searches: []string{"example.test"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}}}),
			"search ns1.svc.cluster.local svc.cluster.local cluster.local example.test\nnameserver 10.97.0.10\nnameserver 203.0.113.53\noptions ndots:2 edns0\n"},
		{"None", pod(corev1.DNSNone, false, &corev1.PodDNSConfig{Nameservers: []string{"203.0.113.53"}}), "nameserver 203.0.113.53\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := resolvConf(tc.pod, dns)
			if ok != (tc.want != "") || got != tc.want {
				t.Errorf("got %q (own file %v), want %q", got, ok, tc.want)
			}
		})
	}
}

func TestHostsFile(t *testing.T) {
	ip := netip.MustParseAddr("10.1.0.5")
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns1"},
		Spec: corev1.PodSpec{Hostname: "web", Subdomain: "svc1",
			HostAliases: []corev1.HostAlias{{IP: "203.0.113.7", Hostnames: []string{"a.test", "b.test"}}}}}
	got := hostsFile(p, ip)
	for _, want := range []string{"127.0.0.1\tlocalhost\n", "10.1.0.5\tweb.svc1.ns1.svc.cluster.local\tweb\n", "203.0.113.7\ta.test\tb.test\n"} {
		if !contains(got, want) {
			t.Errorf("hosts file lacks %q:\n%s", want, got)
		}
	}
	plain := hostsFile(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, ip)
	if !contains(plain, "10.1.0.5\tp\n") {
		t.Errorf("hosts file lacks the pod's name:\n%s", plain)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
