package drivers

import (
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

func TestNewUnknownBackend(t *testing.T) {
	_, err := New("ipsec", tunnel.Options{Device: "x"})
	if err == nil || !strings.Contains(err.Error(), "vxlan") || !strings.Contains(err.Error(), "wireguard") {
		t.Fatalf("New(ipsec) = %v, want an error listing the supported backends", err)
	}
	if _, err := New("vxlan", tunnel.Options{}); err == nil {
		t.Fatal("New without a device name succeeded")
	}
}
