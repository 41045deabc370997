package servicediscovery

import (
	"encoding/json"
	"testing"
)

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// equalJSON compares by encoding, which treats nil and empty the way the API server does.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	return toJSON(t, a) == toJSON(t, b)
}
