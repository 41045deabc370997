package nodeagent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteVolume(t *testing.T) {
	dir := t.TempDir()
	if err := writeVolume(dir, map[string][]byte{"a": []byte("1"), "sub/b": []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if err := writeVolume(dir, map[string][]byte{"a": []byte("changed")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "a")); string(got) != "changed" {
		t.Errorf("a = %q, want changed", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub was not removed with its key: %v", err)
	}
	if err := writeVolume(dir, map[string][]byte{"../escape": nil}); err == nil {
		t.Error("a path leaving the volume was accepted")
	}
}
