package servicediscovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

const (
	// maxNameLength keeps record names valid as label values and DNS labels too, so that the
	// import side may use them anywhere.
	maxNameLength = 63
	// nameHashLength is how many hex digits of the hash end every record name.
	nameHashLength = 10
	// maxEndpointsPerSlice is the API server's limit on endpoints in one EndpointSlice.
	maxEndpointsPerSlice = 1000
	// endpointSliceManager is the endpointslice.kubernetes.io/managed-by value of published
	// slices, so that no EndpointSlice controller on the hub takes them for its own.
	endpointSliceManager = "servicediscovery.octopus.io"
)

// published is what one cluster publishes on the hub for one exported service.
type published struct {
	record *mcsv1beta1.ServiceImport
	slices []*discoveryv1.EndpointSlice
}

// recordName is the hub name of cluster's export of the service key. It starts with
// <svc>-<ns>-<cluster>, cut to fit, for people reading `kubectl get serviceimports`, and always
// ends with a hash of the three parts: the readable part alone is ambiguous (service a-b in
// namespace c and service a in namespace b-c give the same string) and may be truncated.
// Software finds records by their labels, never by parsing the name.
func recordName(key types.NamespacedName, clusterID string) string {
	sum := sha256.Sum256([]byte(key.Namespace + "/" + key.Name + "/" + clusterID))
	hash := hex.EncodeToString(sum[:])[:nameHashLength]
	readable := key.Name + "-" + key.Namespace + "-" + clusterID
	if limit := maxNameLength - nameHashLength - 1; len(readable) > limit {
		readable = strings.TrimRight(readable[:limit], "-")
	}
	return readable + "-" + hash
}

// sliceName names the i-th slice of an endpoint set, unique among one record's slices and
// stable while the set's address type and ports stay the same, so that endpoint changes
// update slices in place instead of replacing them.
func sliceName(record string, set EndpointSet, i int) string {
	sum := sha256.Sum256([]byte(portsKey(set.Ports)))
	name := fmt.Sprintf("%s-%s-%s", record, strings.ToLower(string(set.AddressType)), hex.EncodeToString(sum[:])[:6])
	if i > 0 {
		name += fmt.Sprintf("-%d", i)
	}
	return name
}

// hubLabels select everything cluster publishes for the service key: the ownership label the
// hub's admission policy checks, and the MCS labels naming the service and its source cluster.
func hubLabels(key types.NamespacedName, clusterID string) map[string]string {
	return map[string]string{
		v1alpha1.ClusterLabel:          clusterID,
		v1alpha1.ServiceNamespaceLabel: key.Namespace,
		mcsv1beta1.LabelServiceName:    key.Name,
		mcsv1beta1.LabelSourceCluster:  clusterID,
	}
}

// desiredState computes what cluster publishes in hubNamespace for an export of svc as typ,
// with the endpoint sets the AddressPolicy chose.
func desiredState(hubNamespace, clusterID string, export *mcsv1beta1.ServiceExport, svc *corev1.Service, typ mcsv1beta1.ServiceImportType, sets []EndpointSet) (published, error) {
	key := types.NamespacedName{Namespace: export.Namespace, Name: export.Name}
	name := recordName(key, clusterID)
	annotations := map[string]string{
		v1alpha1.ExportCreatedAnnotation: export.CreationTimestamp.UTC().Format(time.RFC3339),
	}
	for ann, m := range map[string]map[string]string{
		v1alpha1.ExportedLabelsAnnotation:      export.Spec.ExportedLabels,
		v1alpha1.ExportedAnnotationsAnnotation: export.Spec.ExportedAnnotations,
	} {
		if len(m) == 0 {
			continue
		}
		b, err := json.Marshal(m) // maps marshal with sorted keys: stable output
		if err != nil {
			return published{}, fmt.Errorf("encoding %s of ServiceExport %s: %w", ann, key, err)
		}
		annotations[ann] = string(b)
	}
	ports := make([]mcsv1beta1.ServicePort, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		ports = append(ports, mcsv1beta1.ServicePort{Name: p.Name, Protocol: protocolOrTCP(p.Protocol), AppProtocol: p.AppProtocol, Port: p.Port})
	}
	record := &mcsv1beta1.ServiceImport{
		TypeMeta:   metav1.TypeMeta{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hubNamespace, Labels: hubLabels(key, clusterID), Annotations: annotations},
		Spec: mcsv1beta1.ServiceImportSpec{
			// Never nil: the CRD requires the field, and a headless service may have no ports.
			Ports:                 ports,
			Type:                  typ,
			SessionAffinity:       svc.Spec.SessionAffinity,
			SessionAffinityConfig: svc.Spec.SessionAffinityConfig.DeepCopy(),
			IPFamilies:            svc.Spec.IPFamilies,
			InternalTrafficPolicy: svc.Spec.InternalTrafficPolicy,
			TrafficDistribution:   svc.Spec.TrafficDistribution,
			// ips stays empty: the ClusterSet IP is the importing cluster's to allocate.
		},
	}
	out := published{record: record}
	for _, set := range sets {
		for i, start := 0, 0; start < len(set.Endpoints); i, start = i+1, start+maxEndpointsPerSlice {
			end := min(start+maxEndpointsPerSlice, len(set.Endpoints))
			labels := hubLabels(key, clusterID)
			labels[discoveryv1.LabelManagedBy] = endpointSliceManager
			out.slices = append(out.slices, &discoveryv1.EndpointSlice{
				TypeMeta:    metav1.TypeMeta{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice"},
				ObjectMeta:  metav1.ObjectMeta{Name: sliceName(name, set, i), Namespace: hubNamespace, Labels: labels},
				AddressType: set.AddressType,
				Endpoints:   set.Endpoints[start:end],
				Ports:       set.Ports,
			})
		}
	}
	return out, nil
}

// ownedAnnotations are the record annotations the exporter sets; one that is no longer wanted
// (the export's exportedLabels emptied, say) must be removed, so its presence is a difference.
var ownedAnnotations = []string{v1alpha1.ExportCreatedAnnotation, v1alpha1.ExportedLabelsAnnotation, v1alpha1.ExportedAnnotationsAnnotation, v1alpha1.AddressingAnnotation}

// subset reports whether every entry of want is in have.
func subset(want, have map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// sameKeys reports whether want and have agree on which of keys they hold.
func sameKeys(want, have map[string]string, keys []string) bool {
	for _, k := range keys {
		_, w := want[k]
		_, h := have[k]
		if w != h {
			return false
		}
	}
	return true
}

// Publication is what clusterID publishes in hubNamespace for export of svc, whose
// EndpointSlices in its cluster are local, under direct addressing: the record and the
// EndpointSlices, exactly as the export controller writes them. The scale benchmark uses it to
// stand in for clusters it does not run.
func Publication(hubNamespace, clusterID string, export *mcsv1beta1.ServiceExport, svc *corev1.Service, local []discoveryv1.EndpointSlice) (*mcsv1beta1.ServiceImport, []*discoveryv1.EndpointSlice, error) {
	typ, ok := ImportType(svc)
	if !ok {
		return nil, nil, fmt.Errorf("publishing Service %s/%s: type %s cannot be exported", svc.Namespace, svc.Name, svc.Spec.Type)
	}
	sets, _ := DirectAddresses{}.Endpoints(context.Background(), svc, typ, local) // never fails
	p, err := desiredState(hubNamespace, clusterID, export, svc, typ, sets)
	if err != nil {
		return nil, nil, err
	}
	return p.record, p.slices, nil
}
