package bench

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
	"github.com/octopus-mcs/octopus/internal/workload"
)

// server is what the clients can know of one cluster's bench server.
type server struct {
	// podIP is the server pod's primary address.
	podIP netip.Addr
	// secondaryIP is its address on the secondary network (the pod's net1), when it has one.
	secondaryIP netip.Addr
	// clusterIP is the bench Service's cluster IP, the in-cluster way to the Service.
	clusterIP netip.Addr
	// globalIP is the pod's global IP, when its cluster uses globalnet addressing.
	globalIP netip.Addr
	// podIP6 and clusterIP6 are the pod's and the Service's IPv6 addresses beside their IPv4
	// ones, in a dual-stack cluster with direct addressing (workload.SecondIPv6,
	// workload.ServiceIPv6); invalid elsewhere.
	podIP6, clusterIP6 netip.Addr
}

// inFamily is the server as a client of family reaches it: for IPv6 its IPv6 addresses alone
// (IPv6 is measured only between dual-stack clusters with direct addressing, which have no
// secondary or global addresses); for IPv4 and the family-less measurement, srv as it is.
func (srv server) inFamily(family string) server {
	if family != workload.FamilyIPv6 {
		return srv
	}
	return server{podIP: srv.podIP6, clusterIP: srv.clusterIP6}
}

// secondaryAddr returns the pod's address on the secondary network from its network-status
// annotation, or the zero Addr when it is not on it.
func secondaryAddr(annotations map[string]string) (netip.Addr, error) {
	st, ok, err := podnet.Find(annotations)
	if err != nil || !ok {
		return netip.Addr{}, err
	}
	for _, s := range st.IPs {
		if a, err := netip.ParseAddr(s); err == nil {
			return a, nil
		}
	}
	return netip.Addr{}, nil
}

// ErrNotApplicable marks a path the clusters' addressing mode does not have, such as
// pod-to-service across clusters from a cluster with secondary addressing: nothing there can
// fail, so it is reported as not applicable rather than as a failed measurement.
var ErrNotApplicable = errors.New("not applicable")

// address is where a client reaches a server over path in family ("" for the pair's only
// one, workload.PairFamilies): the one place that knows how each addressing mode addresses pods
// and services across clusters, so that every measurement uses the address a workload would.
// The IPv6 measurement of a dual-stack pair takes the IPv6 address of whatever the rules
// below pick (srv.inFamily, imp.IPv6); the others the primary one.
//
//   - pod-to-pod in the client's own cluster: the pod IP.
//   - pod-to-pod across clusters: the server's secondary-network address when it has one
//     (secondary addressing: primary CIDRs may overlap, and only net1 is routed between
//     clusters); in a globalnet cluster its global IP, which a headless export of the server
//     gives it (pod CIDRs may overlap); else its pod IP (direct addressing).
//   - pod-to-service in the client's own cluster: the Service's cluster IP.
//   - pod-to-service across clusters: the ClusterSet IP of the client cluster's ServiceImport,
//     which globalnet makes a global address; none from a client cluster with secondary
//     addressing (fromSecondary), whose imports have none: DNS answers with the exporting
//     pods' net1 addresses there (docs/architecture.md §6s), which pod-to-pod measures.
func address(path Path, family string, crossCluster, fromSecondary bool, srv server, imp workload.ImportIPs) (netip.Addr, error) {
	var a netip.Addr
	var what string
	srv, clusterSetIP := srv.inFamily(family), imp.Primary
	if family == workload.FamilyIPv6 {
		clusterSetIP = imp.IPv6
	}
	switch {
	case path == PathService && crossCluster && fromSecondary:
		return netip.Addr{}, fmt.Errorf("%w: a cluster with secondary addressing has no ClusterSet IP (DNS answers with the exporting pods' net1 addresses); pod-to-pod measures the same path", ErrNotApplicable)
	case path == PathPod && !crossCluster:
		a, what = srv.podIP, "server pod IP"
	case path == PathPod && srv.secondaryIP.IsValid():
		a = srv.secondaryIP
	case path == PathPod && srv.globalIP.IsValid():
		a = srv.globalIP
	case path == PathPod:
		a, what = srv.podIP, "server pod IP"
	case path == PathService && !crossCluster:
		a, what = srv.clusterIP, "cluster IP of the bench Service"
	case path == PathService:
		a, what = clusterSetIP, "ClusterSet IP (the ServiceImport of the bench Service has none: is service discovery running? `octopus show services`)"
	default:
		return netip.Addr{}, fmt.Errorf("unknown path %q", path)
	}
	if !a.IsValid() {
		if family != "" {
			return netip.Addr{}, fmt.Errorf("no %s address for %s: no %s %s", family, path, family, what)
		}
		return netip.Addr{}, fmt.Errorf("no address for %s: no %s", path, what)
	}
	return a, nil
}
