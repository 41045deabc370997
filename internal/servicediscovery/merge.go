package servicediscovery

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// exportRecord is one cluster's export of a service as the import side reads it from the hub.
type exportRecord struct {
	Cluster string
	// Created is the ServiceExport's creation time; zero when the record does not say, which
	// sorts after every real time so that a malformed record never wins a conflict.
	Created time.Time
	Spec    mcsv1beta1.ServiceImportSpec
	// Labels and Annotations are the export's exportedLabels and exportedAnnotations.
	Labels      map[string]string
	Annotations map[string]string
}

// conflict is one property of a cluster's export that disagrees with the oldest export's and
// lost: Reason is one of the KEP's Conflict reasons.
type conflict struct {
	Reason  mcsv1beta1.ServiceExportConditionReason
	Message string
}

// mergedService is what every exporting cluster's records of one service add up to, by the
// KEP's rules.
type mergedService struct {
	// Spec is the ServiceImport's spec, without ips (the importing cluster allocates those).
	Spec mcsv1beta1.ServiceImportSpec
	// Labels and Annotations are the oldest export's exported labels and annotations.
	Labels      map[string]string
	Annotations map[string]string
	// Clusters are the clusters whose endpoints the import uses, sorted: every exporter whose
	// type agrees with the oldest export's.
	Clusters []string
	// Conflicts holds, per cluster, where its export lost to an older one; clusters without
	// conflicts are absent.
	Conflicts map[string][]conflict
	// PortClusters holds, per name of an imported port, the clusters whose export has exactly
	// that port (samePort), sorted: only they may receive its traffic.
	PortClusters map[string][]string
	// Families are the address families of the endpoints the import has (endpointFamilies),
	// IPv4 first; empty until some cluster publishes a slice. Only
	// ClusterSet IPs of these families are offered: an IPv6 virtual IP of a dual-stack cluster
	// importing from IPv4-only exporters would balance over nothing.
	Families []corev1.IPFamily
}

// endpointFamilies returns the address families of the hub slices published by clusters, IPv4
// first. A slice counts whether or not its endpoints are ready: a family must not come and go
// from DNS with readiness.
func endpointFamilies(hubSlices []discoveryv1.EndpointSlice, clusters []string) []corev1.IPFamily {
	var v4, v6 bool
	for _, s := range hubSlices {
		if !slices.Contains(clusters, s.Labels[mcsv1beta1.LabelSourceCluster]) {
			continue
		}
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4:
			v4 = true
		case discoveryv1.AddressTypeIPv6:
			v6 = true
		}
	}
	var out []corev1.IPFamily
	if v4 {
		out = append(out, corev1.IPv4Protocol)
	}
	if v6 {
		out = append(out, corev1.IPv6Protocol)
	}
	return out
}

// parseRecord reads an exportRecord from a record on the hub. A malformed annotation costs
// only what it carries (no creation time, no exported labels), never the whole export: the
// endpoints are still worth importing.
func parseRecord(rec *mcsv1beta1.ServiceImport) exportRecord {
	out := exportRecord{Cluster: rec.Labels[mcsv1beta1.LabelSourceCluster], Spec: rec.Spec}
	if t, err := time.Parse(time.RFC3339, rec.Annotations[v1alpha1.ExportCreatedAnnotation]); err == nil {
		out.Created = t
	}
	for ann, dst := range map[string]*map[string]string{
		v1alpha1.ExportedLabelsAnnotation:      &out.Labels,
		v1alpha1.ExportedAnnotationsAnnotation: &out.Annotations,
	} {
		if s := rec.Annotations[ann]; s != "" {
			_ = json.Unmarshal([]byte(s), dst) //nolint:errcheck // see above: a bad annotation exports nothing
		}
	}
	return out
}

// olderFirst orders exports by age, the oldest first, ties broken by cluster ID so that every
// cluster resolves a conflict the same way; records without a creation time come last.
func olderFirst(a, b exportRecord) int {
	switch {
	case a.Created.IsZero() != b.Created.IsZero():
		if a.Created.IsZero() {
			return 1
		}
		return -1
	case !a.Created.Equal(b.Created):
		return a.Created.Compare(b.Created)
	}
	return cmp.Compare(a.Cluster, b.Cluster)
}

// merge combines the records of one service by KEP-1645's rules ("Constraints and conflict
// resolution"): every property comes from the oldest export, except ports, which are the union
// of all exports' ports. A port of a younger export conflicts when its name is already taken
// by a different port (number, protocol or appProtocol), or its number and protocol by a port
// of another name (a Service cannot hold both); the older one stays. An export that lacks a
// port of the union conflicts as well (the KEP: "the union ... is exposed, and the difference
// is a conflict"). An export whose type
// differs from the oldest's is left out altogether: a ClusterSetIP import would otherwise
// balance over pod addresses and a headless one hand out ClusterIPs as pod addresses.
//
// merge is pure and deterministic: records may come in any order. It returns the zero value
// for no records.
func merge(records []exportRecord) mergedService {
	if len(records) == 0 {
		return mergedService{}
	}
	sorted := slices.Clone(records)
	slices.SortFunc(sorted, olderFirst)
	oldest := sorted[0]
	out := mergedService{
		Spec: mcsv1beta1.ServiceImportSpec{
			Ports:                 []mcsv1beta1.ServicePort{},
			Type:                  oldest.Spec.Type,
			SessionAffinity:       oldest.Spec.SessionAffinity,
			SessionAffinityConfig: oldest.Spec.SessionAffinityConfig.DeepCopy(),
			IPFamilies:            slices.Clone(oldest.Spec.IPFamilies),
			InternalTrafficPolicy: oldest.Spec.InternalTrafficPolicy,
			TrafficDistribution:   oldest.Spec.TrafficDistribution,
		},
		Labels:       maps.Clone(oldest.Labels),
		Annotations:  maps.Clone(oldest.Annotations),
		Conflicts:    map[string][]conflict{},
		PortClusters: map[string][]string{},
	}
	// Each port imported so far, with the cluster it came from, by name and by
	// "<port>/<protocol>".
	type owned struct {
		port    mcsv1beta1.ServicePort
		cluster string
	}
	byName := map[string]owned{}
	byNumber := map[string]owned{}
	for _, rec := range sorted {
		report := func(reason mcsv1beta1.ServiceExportConditionReason, format string, args ...any) {
			out.Conflicts[rec.Cluster] = append(out.Conflicts[rec.Cluster], conflict{Reason: reason, Message: fmt.Sprintf(format, args...)})
		}
		if rec.Spec.Type != oldest.Spec.Type {
			report(mcsv1beta1.ServiceExportReasonTypeConflict, "type %s conflicts with %s of the oldest export (cluster %s); this cluster's endpoints are not imported",
				rec.Spec.Type, oldest.Spec.Type, oldest.Cluster)
			continue
		}
		out.Clusters = append(out.Clusters, rec.Cluster)
		if rec.Spec.SessionAffinity != oldest.Spec.SessionAffinity {
			report(mcsv1beta1.ServiceExportReasonSessionAffinityConflict, "session affinity %q conflicts with %q of the oldest export (cluster %s)",
				rec.Spec.SessionAffinity, oldest.Spec.SessionAffinity, oldest.Cluster)
		} else if !equality.Semantic.DeepEqual(rec.Spec.SessionAffinityConfig, oldest.Spec.SessionAffinityConfig) {
			report(mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict, "session affinity config conflicts with the oldest export's (cluster %s)", oldest.Cluster)
		}
		if !equality.Semantic.DeepEqual(rec.Spec.InternalTrafficPolicy, oldest.Spec.InternalTrafficPolicy) {
			report(mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict, "internal traffic policy conflicts with the oldest export's (cluster %s)", oldest.Cluster)
		}
		if !equality.Semantic.DeepEqual(rec.Spec.TrafficDistribution, oldest.Spec.TrafficDistribution) {
			report(mcsv1beta1.ServiceExportReasonTrafficDistributionConflict, "traffic distribution conflicts with the oldest export's (cluster %s)", oldest.Cluster)
		}
		if !equalMaps(rec.Labels, oldest.Labels) {
			report(mcsv1beta1.ServiceExportReasonLabelsConflict, "exported labels conflict with the oldest export's (cluster %s)", oldest.Cluster)
		}
		if !equalMaps(rec.Annotations, oldest.Annotations) {
			report(mcsv1beta1.ServiceExportReasonAnnotationsConflict, "exported annotations conflict with the oldest export's (cluster %s)", oldest.Cluster)
		}
		var lost []string
		for _, p := range rec.Spec.Ports {
			p.Protocol = protocolOrTCP(p.Protocol)
			number := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
			if have, ok := byName[p.Name]; ok {
				if !samePort(have.port, p) {
					lost = append(lost, fmt.Sprintf("%s (name taken by %s of cluster %s)", describePort(p), describePort(have.port), have.cluster))
				} else if !slices.Contains(out.PortClusters[p.Name], rec.Cluster) {
					out.PortClusters[p.Name] = append(out.PortClusters[p.Name], rec.Cluster)
				}
				continue
			}
			if have, ok := byNumber[number]; ok {
				lost = append(lost, fmt.Sprintf("%s (number taken by %s of cluster %s)", describePort(p), describePort(have.port), have.cluster))
				continue
			}
			byName[p.Name], byNumber[number] = owned{p, rec.Cluster}, owned{p, rec.Cluster}
			out.Spec.Ports = append(out.Spec.Ports, p)
			out.PortClusters[p.Name] = []string{rec.Cluster}
		}
		if len(lost) > 0 {
			report(mcsv1beta1.ServiceExportReasonPortConflict, "ports %s conflict with older exports; the older ports are imported", strings.Join(lost, ", "))
		}
	}
	// The KEP's port rule has two halves: the union is exposed, and the difference between the
	// exports' port sets is a conflict too. So every export that lacks a port of the union says
	// which ones and whose they are. A union port whose name or number the export holds under
	// another definition is left out here: the lost-port message above already names it.
	for _, rec := range sorted {
		if rec.Spec.Type != oldest.Spec.Type {
			continue
		}
		var missing []string
		for _, u := range out.Spec.Ports {
			if !slices.ContainsFunc(rec.Spec.Ports, func(p mcsv1beta1.ServicePort) bool {
				return p.Name == u.Name || (p.Port == u.Port && protocolOrTCP(p.Protocol) == u.Protocol)
			}) {
				missing = append(missing, fmt.Sprintf("%s of cluster %s", describePort(u), byName[u.Name].cluster))
			}
		}
		if len(missing) > 0 {
			out.Conflicts[rec.Cluster] = append(out.Conflicts[rec.Cluster], conflict{
				Reason: mcsv1beta1.ServiceExportReasonPortConflict,
				Message: fmt.Sprintf("ports %s are not in this cluster's export; the import exposes the union of all exports' ports",
					strings.Join(missing, ", ")),
			})
		}
	}
	slices.Sort(out.Clusters)
	for _, cs := range out.PortClusters {
		slices.Sort(cs)
	}
	return out
}

// ownedPorts returns the ports of hub slice hs of cluster that the cluster may receive
// traffic on: those named as an imported port whose definition the cluster's export agrees
// with. A port that lost a conflict keeps its name on the exporter's slices (a younger export's
// tcp:4242 targeting 42 is named tcp like the winning tcp:42), and kube-proxy matches service
// and slice ports by name, so without this the winner's port would also be sent to the loser's
// pods, which never exposed it. ok is false when the slice has ports but none of them is the
// cluster's to serve: then it imports nothing.
func (m *mergedService) ownedPorts(cluster string, ports []discoveryv1.EndpointPort) (owned []discoveryv1.EndpointPort, ok bool) {
	if len(ports) == 0 {
		return ports, true
	}
	for _, p := range ports {
		if slices.Contains(m.PortClusters[ptr.Deref(p.Name, "")], cluster) {
			owned = append(owned, p)
		}
	}
	return owned, len(owned) > 0
}

func samePort(a, b mcsv1beta1.ServicePort) bool {
	return a.Name == b.Name && a.Port == b.Port && protocolOrTCP(a.Protocol) == protocolOrTCP(b.Protocol) &&
		ptr.Deref(a.AppProtocol, "") == ptr.Deref(b.AppProtocol, "")
}

func describePort(p mcsv1beta1.ServicePort) string {
	s := fmt.Sprintf("%d/%s", p.Port, protocolOrTCP(p.Protocol))
	if p.Name != "" {
		s = p.Name + ":" + s
	}
	if p.AppProtocol != nil {
		s += "(" + *p.AppProtocol + ")"
	}
	return s
}

// equalMaps treats nil and empty as equal, as the API server does.
func equalMaps(a, b map[string]string) bool {
	return len(a) == len(b) && subset(a, b)
}
