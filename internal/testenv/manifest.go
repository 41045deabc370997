package testenv

import (
	"errors"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Decode returns the objects of a YAML (or JSON) stream, such as a chart's rendered template,
// in order, empty documents left out; it fails t if the stream does not decode.
func Decode(t testing.TB, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := d.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decoding a manifest: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
