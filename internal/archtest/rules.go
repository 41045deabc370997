package archtest

// Provisioning is the code that sets clusters up and must never run inside one: the embedded
// CRDs, hub deploy, join and leave, the CoreDNS wiring of join, the rendered manifests, the
// CLI and the lab.
var Provisioning = []string{
	"config/crd", "internal/hub", "internal/cluster", "internal/dnsconfig", "internal/render",
	"internal/cli", "internal/lab/...",
}

// Daemons are the binaries that run in clusters.
var Daemons = []string{"cmd/octopus-agent", "cmd/octopus-dns"}

// Rules are the repository's dependency rules (docs/architecture.md §2).
var Rules = []Rule{
	{
		Name:      "daemons link no provisioning code",
		Packages:  Daemons,
		Forbidden: Provisioning,
		Linked:    true,
	},
}
