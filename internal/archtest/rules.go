package archtest

// The lists the rules are made of. When packages move, update these (a rule that matches no
// package fails the test, so a stale list cannot pass unnoticed).
var (
	// DataPlane are the packages that program the kernel from a desired state: tunnels,
	// routes, NAT, the OVN client, all under internal/datapath. Kubernetes-side packages
	// (gateway, routeagent, globalnet, ovn) translate API objects into that state.
	DataPlane = []string{"internal/datapath/..."}

	// PureLogic is repository code that the data plane may link: address arithmetic with no
	// dependency of its own (its packages import nothing of the repository either).
	PureLogic = []string{"internal/ipam/..."}

	// KubernetesClients are the Kubernetes libraries the data plane must not link.
	KubernetesClients = []string{
		"k8s.io/client-go/...", "sigs.k8s.io/controller-runtime/...", "k8s.io/api/...", "k8s.io/apimachinery/...",
	}

	// Provisioning is the code that sets clusters up and never runs inside one: the embedded
	// CRDs and RBAC, hub deploy, join and leave, the rendered manifests, the charts and their
	// Helm releases, the image builder, the CLI and the lab. (internal/dnsconfig is not: join
	// adds the Corefile block with it, and the agent keeps the block's reverse zones in step
	// with the clusters that come and go, internal/agent/reversedns.go.)
	Provisioning = []string{
		"config/crd", "config/rbac", "internal/hub", "internal/cluster", "internal/manifests/...",
		"internal/cli", "internal/lab/...", "internal/diagnose", "internal/gather/...",
		"charts", "internal/image", "internal/operator",
	}

	// Operator is the Fabric operator: provisioning code that runs in a cluster, in a binary of
	// its own (cmd/octopus-operator) so that the daemons never link it.
	Operator = []string{"cmd/octopus-operator", "internal/operator"}

	// CLIOnly is the provisioning code that only the user's machine runs: the CLI, the lab and
	// the tools the CLI drives against clusters from outside (diagnose, gather, dashboard and
	// its browser driver, verify, bench and their pods' scaffolding) or at build time (the
	// image builder, the charts' generator). The operator runs in a cluster, so the daemon
	// rule applies to it with this list: it is provisioning code by nature (it deploys hubs
	// and joins clusters, internal/operator), but nothing of it needs these.
	CLIOnly = []string{
		"internal/cli", "internal/lab/...", "internal/testenv", "internal/diagnose", "internal/gather/...",
		"internal/dashboard/...", "internal/browser", "internal/verify", "internal/bench/...", "internal/workload",
		"internal/image", "internal/manifests/chartgen",
	}

	// Daemons are the binaries that run in clusters besides the operator: the agent's
	// components, the DNS server, the OVN components and the echo workload of verify and bench.
	Daemons = []string{"cmd/octopus-agent", "cmd/octopus-dns", "cmd/octopus-ovn", "cmd/octopus-echo"}

	// LabUsers may import the lab: the CLI's lab commands, the lab itself, the test
	// environment and the tools under hack/ (tests may too; Load leaves test files out).
	LabUsers = []string{"internal/cli", "internal/lab/...", "internal/testenv", "hack/...", "test/..."}
)

// Rules are the repository's dependency rules (docs/architecture.md §2).
var Rules = []Rule{
	{
		Name:      "the API links no package of this repository",
		Packages:  []string{"api/..."},
		Forbidden: []string{"..."},
		Linked:    true,
	},
	{
		Name:      "the data plane links no Kubernetes library",
		Packages:  DataPlane,
		Forbidden: KubernetesClients,
		Linked:    true,
	},
	{
		Name:      "the data plane links nothing of this repository but the data plane and pure address logic",
		Packages:  DataPlane,
		Forbidden: []string{"..."},
		Allowed:   append(append([]string{}, DataPlane...), PureLogic...),
		Linked:    true,
	},
	{
		Name:      "pkg/crossdns links nothing internal, so that other CoreDNS builds can compile it in",
		Packages:  []string{"pkg/crossdns/..."},
		Forbidden: []string{"internal/..."},
		Linked:    true,
	},
	{
		Name:      "only the CLI, tests and hack/ import the lab",
		Packages:  []string{"..."},
		Except:    LabUsers,
		Forbidden: []string{"internal/lab/..."},
	},
	{
		Name:      "the operator links neither the CLI nor the lab nor the CLI's tools: it runs in a cluster",
		Packages:  Operator,
		Forbidden: CLIOnly,
		Linked:    true,
	},
	{
		Name:      "daemons link no provisioning code",
		Packages:  Daemons,
		Forbidden: Provisioning,
		Linked:    true,
	},
}
