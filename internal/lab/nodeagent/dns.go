package nodeagent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ClusterDomain is the lab clusters' DNS domain, kubeadm's default.
const ClusterDomain = "cluster.local"

// ClusterDNSAddr returns the ClusterIP of the kube-dns Service in a cluster with the given
// service CIDR: its 10th address, as kubeadm chooses.
func ClusterDNSAddr(serviceCIDR netip.Prefix) (netip.Addr, error) {
	a := serviceCIDR.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	if !a.IsValid() || !serviceCIDR.Contains(a) {
		return netip.Addr{}, fmt.Errorf("service CIDR %s has no 10th address for cluster DNS", serviceCIDR)
	}
	return a, nil
}

// resolvConf returns the pod's resolv.conf as the kubelet writes it for the ClusterFirst DNS
// policy (and ClusterFirstWithHostNet), with the pod's dnsConfig merged in; ok is false when
// the pod uses the node's resolv.conf (Default, or ClusterFirst with hostNetwork).
func resolvConf(pod *corev1.Pod, dns netip.Addr) (conf string, ok bool) {
	var servers, search []string
	options := []string{}
	switch pod.Spec.DNSPolicy {
	case corev1.DNSDefault:
		return "", false
	case corev1.DNSNone:
	case corev1.DNSClusterFirstWithHostNet:
		servers, search, options = clusterFirst(pod.Namespace, dns)
	default: // ClusterFirst, the API default
		if pod.Spec.HostNetwork {
			return "", false
		}
		servers, search, options = clusterFirst(pod.Namespace, dns)
	}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = append(servers, c.Nameservers...)
		search = append(search, c.Searches...)
		for _, o := range c.Options {
			name := o.Name
			options = slices.DeleteFunc(options, func(s string) bool { return strings.SplitN(s, ":", 2)[0] == name })
			if o.Value != nil {
				name += ":" + *o.Value
			}
			options = append(options, name)
		}
	}
	// The kubelet's order: search, nameservers, options.
	var b strings.Builder
	if len(search) > 0 {
		b.WriteString("search " + strings.Join(search, " ") + "\n")
	}
	for _, s := range servers {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(options) > 0 {
		b.WriteString("options " + strings.Join(options, " ") + "\n")
	}
	return b.String(), true
}

func clusterFirst(namespace string, dns netip.Addr) (servers, search, options []string) {
	return []string{dns.String()},
		[]string{namespace + ".svc." + ClusterDomain, "svc." + ClusterDomain, ClusterDomain},
		[]string{"ndots:5"}
}

// hostsFile returns the pod's /etc/hosts as the kubelet writes it: localhost entries, the
// pod's own name (fully qualified when it has a subdomain) and its hostAliases.
func hostsFile(pod *corev1.Pod, podIP netip.Addr) string {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (lab node agent).\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	if sub := pod.Spec.Subdomain; sub != "" {
		fmt.Fprintf(&b, "%s\t%s.%s.%s.svc.%s\t%s\n", podIP, hostname, sub, pod.Namespace, ClusterDomain, hostname)
	} else {
		fmt.Fprintf(&b, "%s\t%s\n", podIP, hostname)
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.String()
}
