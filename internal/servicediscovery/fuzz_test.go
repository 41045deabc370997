package servicediscovery

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// FuzzHubRecords feeds the import side three exporters' records as they may sit on the hub,
// every field a member wrote (source cluster, creation time, exported labels, ports, type):
// parseRecord never panics on their annotations; merge gives the same service whatever order
// the hub lists them in; and what it imports is self-consistent: no port name or
// number/protocol twice, every port's clusters among the import's clusters, which are all
// exporters whose type is the import's.
func FuzzHubRecords(f *testing.F) {
	f.Add("east", "west", "north", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "", `{"app":"web"}`, "http", "http", "dns", uint16(80), uint16(8080), uint16(53), byte(0), false, true)
	f.Add("a", "a", "", "bad", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", `[`, "", "", "", uint16(0), uint16(0), uint16(65535), byte(3), true, true)
	f.Fuzz(func(t *testing.T, c1, c2, c3, t1, t2, t3, labels, n1, n2, n3 string, p1, p2, p3 uint16, proto byte, headless1, headless3 bool) {
		// The hub holds one record per cluster and service (its name carries the cluster),
		// and the importer skips records that name no cluster (attributed).
		if c1 == "" || c2 == "" || c3 == "" || c1 == c2 || c2 == c3 || c1 == c3 {
			return
		}
		protocols := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP, ""}
		record := func(cluster, created, name string, port uint16, headless bool, i int) *mcsv1beta1.ServiceImport {
			typ := mcsv1beta1.ClusterSetIP
			if headless {
				typ = mcsv1beta1.Headless
			}
			return &mcsv1beta1.ServiceImport{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{mcsv1beta1.LabelSourceCluster: cluster},
					Annotations: map[string]string{v1alpha1.ExportCreatedAnnotation: created, v1alpha1.ExportedLabelsAnnotation: labels},
				},
				Spec: mcsv1beta1.ServiceImportSpec{Type: typ, Ports: []mcsv1beta1.ServicePort{
					{Name: name, Port: int32(port), Protocol: protocols[(int(proto)+i)%len(protocols)]},
				}},
			}
		}
		recs := []exportRecord{
			parseRecord(record(c1, t1, n1, p1, headless1, 0)),
			parseRecord(record(c2, t2, n2, p2, false, 1)),
			parseRecord(record(c3, t3, n3, p3, headless3, 2)),
		}
		m := merge(recs)
		for _, order := range [][]int{{2, 1, 0}, {1, 2, 0}} {
			var shuffled []exportRecord
			for _, i := range order {
				shuffled = append(shuffled, recs[i])
			}
			if other := merge(shuffled); !equality.Semantic.DeepEqual(m, other) {
				t.Fatalf("merge depends on the hub's order:\n%+v\n%+v", m, other)
			}
		}
		names, numbers := map[string]bool{}, map[string]bool{}
		for _, p := range m.Spec.Ports {
			number := fmt.Sprintf("%d/%s", p.Port, protocolOrTCP(p.Protocol))
			if names[p.Name] || numbers[number] {
				t.Fatalf("port %+v imported twice in %+v", p, m.Spec.Ports)
			}
			names[p.Name], numbers[number] = true, true
			for _, c := range m.PortClusters[p.Name] {
				if !slices.Contains(m.Clusters, c) {
					t.Fatalf("port %s goes to %s, which is not among the import's clusters %v", p.Name, c, m.Clusters)
				}
			}
		}
		for _, c := range m.Clusters {
			i := slices.IndexFunc(recs, func(r exportRecord) bool { return r.Cluster == c && r.Spec.Type == m.Spec.Type })
			if i < 0 {
				t.Fatalf("cluster %s imported, but no export of it has the import's type %s", c, m.Spec.Type)
			}
		}
	})
}
