package servicediscovery

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// FuzzMergeRecords merges records of one service from the hub as any set of clusters may
// write them (one record per cluster, as the hub's admission enforces; annotations of any
// content; ports of clashing names and numbers): parseRecord and merge never fail, the result
// does not depend on the order the records arrive in (every cluster resolves a conflict the
// same way), and it is a valid import: ports with distinct names and distinct number/protocol,
// each served only by clusters of the winning type whose export has exactly that port, and
// ownedPorts hands a cluster only ports it serves.
func FuzzMergeRecords(f *testing.F) {
	f.Add([]byte{3, 0, 1, 2, 80, 0, 1, 1, 2, 80, 0, 2, 0, 0, 1, 81})
	f.Add([]byte{2, 0, 0, 1, 1, 1, 1, 255, 1, 0, 0, 2, 7, 7, 7})
	f.Add([]byte{4, 5, 1, 3, 80, 80, 80, 6, 0, 0, 9, 9, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		records := recordsFrom(data)
		got := merge(records)
		for _, order := range [][]exportRecord{reversed(records), rotated(records)} {
			if other := merge(order); !equality.Semantic.DeepEqual(got, other) {
				t.Fatalf("merge depends on the records' order:\n%+v\n%+v", got, other)
			}
		}
		if len(records) == 0 {
			return
		}
		byCluster := map[string]exportRecord{}
		for _, r := range records {
			byCluster[r.Cluster] = r
		}
		if !slices.IsSorted(got.Clusters) {
			t.Fatalf("clusters %v are not sorted", got.Clusters)
		}
		for _, c := range got.Clusters {
			if byCluster[c].Spec.Type != got.Spec.Type {
				t.Fatalf("cluster %s of type %s serves an import of type %s", c, byCluster[c].Spec.Type, got.Spec.Type)
			}
		}
		names, numbers := map[string]bool{}, map[string]bool{}
		for _, p := range got.Spec.Ports {
			number := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
			if names[p.Name] || numbers[number] {
				t.Fatalf("ports %+v: %s or %s twice", got.Spec.Ports, p.Name, number)
			}
			names[p.Name], numbers[number] = true, true
			servers := got.PortClusters[p.Name]
			if len(servers) == 0 {
				t.Fatalf("port %+v has no cluster to serve it", p)
			}
			for _, c := range servers {
				if !slices.Contains(got.Clusters, c) || !slices.ContainsFunc(byCluster[c].Spec.Ports, func(q mcsv1beta1.ServicePort) bool { return samePort(q, p) }) {
					t.Fatalf("cluster %s serves port %+v, which its export %+v does not have (or its type lost)", c, p, byCluster[c].Spec.Ports)
				}
			}
			for c, r := range byCluster {
				for _, q := range r.Spec.Ports {
					if !slices.Contains(got.Clusters, c) || ptr.Deref(q.AppProtocol, "") != ptr.Deref(p.AppProtocol, "") {
						continue
					}
					if q.Name == p.Name && q.Port == p.Port && protocolOrTCP(q.Protocol) == p.Protocol && !slices.Contains(servers, c) {
						t.Fatalf("cluster %s exports port %+v exactly, but does not serve it", c, q)
					}
				}
			}
		}
		for c, r := range byCluster {
			var ports []discoveryv1.EndpointPort
			for _, q := range r.Spec.Ports {
				ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(q.Name), Port: ptr.To(q.Port), Protocol: ptr.To(protocolOrTCP(q.Protocol))})
			}
			owned, _ := got.ownedPorts(c, ports)
			for _, q := range owned {
				if !slices.Contains(got.PortClusters[*q.Name], c) {
					t.Fatalf("ownedPorts gives cluster %s port %s, which it does not serve (%v)", c, *q.Name, got.PortClusters)
				}
			}
		}
		if len(got.PortClusters) != len(got.Spec.Ports) {
			t.Fatalf("servers for %d ports, %d ports", len(got.PortClusters), len(got.Spec.Ports))
		}
	})
}

// recordsFrom decodes fuzz bytes into records of distinct clusters: a count, then per record a
// creation time (0: none, 1: an unparsable annotation, n: n minutes after t0), a type, and
// ports, each a name, a number, a protocol and an app protocol from small sets so that they
// clash often.
func recordsFrom(data []byte) []exportRecord {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	names := []string{"", "http", "tcp", "dns"}
	protocols := []corev1.Protocol{"", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	var out []exportRecord
	for i := range next() % 6 {
		rec := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{mcsv1beta1.LabelSourceCluster: fmt.Sprintf("cluster%d", i+1)},
			Annotations: map[string]string{},
		}}
		switch created := next(); created {
		case 0:
		case 1:
			rec.Annotations[v1alpha1.ExportCreatedAnnotation] = "yesterday"
			rec.Annotations[v1alpha1.ExportedLabelsAnnotation] = `{"a":`
		default:
			rec.Annotations[v1alpha1.ExportCreatedAnnotation] = t0.Add(time.Duration(created%4) * time.Minute).Format(time.RFC3339)
			rec.Annotations[v1alpha1.ExportedLabelsAnnotation] = fmt.Sprintf(`{"tier":"%d"}`, created%2)
		}
		rec.Spec.Type = mcsv1beta1.ClusterSetIP
		if next()%3 == 0 {
			rec.Spec.Type = mcsv1beta1.Headless
		}
		for range next() % 4 {
			p := mcsv1beta1.ServicePort{Name: names[next()%len(names)], Port: int32(80 + next()%3), Protocol: protocols[next()%len(protocols)]}
			if next()%4 == 0 {
				p.AppProtocol = ptr.To("http")
			}
			rec.Spec.Ports = append(rec.Spec.Ports, p)
		}
		out = append(out, parseRecord(rec))
	}
	return out
}

func reversed(r []exportRecord) []exportRecord {
	out := slices.Clone(r)
	slices.Reverse(out)
	return out
}

func rotated(r []exportRecord) []exportRecord {
	if len(r) < 2 {
		return r
	}
	return append(slices.Clone(r[1:]), r[0])
}
