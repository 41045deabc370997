// Package render computes the objects Octopus puts into clusters, as pure functions of their
// options (no client, no I/O): the hub's (Hub), a member's (Member, with its octopus-dns), and
// what joining writes on the hub (ClusterServiceAccount, ClusterGrant, Cluster). Hub deploy
// and join apply them; the charts' golden tests and the operator render the same objects, so
// that every installation path shares one source of manifests.
package render

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/octopus-mcs/octopus/internal/kube"
)

// YAML renders objects as one YAML stream, a document each, in order: with apiVersion and
// kind (from kube.Scheme), and without the fields the API server owns (creationTimestamp,
// status), so that the output can be applied as it is.
func YAML(objs ...client.Object) ([]byte, error) {
	var buf bytes.Buffer
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, kube.Scheme)
		if err != nil {
			return nil, fmt.Errorf("finding the kind of %T: %w", obj, err)
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("converting %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
		}
		m["apiVersion"], m["kind"] = gvk.GroupVersion().String(), gvk.Kind
		delete(m, "status")
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		// Through JSON, so that the YAML has the API's field names and only them.
		j, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
		}
		buf.WriteString("---\n")
		buf.Write(y)
	}
	return buf.Bytes(), nil
}
