package diagnose

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/version"
)

// Kubernetes minor versions Octopus depends on.
const (
	// hubMinMinor: the hub's isolation between clusters is a ValidatingAdmissionPolicy
	// (internal/manifests/render/policy.go), served as admissionregistration.k8s.io/v1 since 1.30.
	hubMinMinor = 30
	// memberMinMinor: join discovers a cluster's service CIDRs from networking.k8s.io/v1
	// ServiceCIDR objects (internal/cluster/discover.go), served since 1.33; older clusters
	// must be joined with --service-cidr.
	memberMinMinor = 33
	// maxMinorSpread: the Kubernetes project maintains the three most recent minor releases,
	// so a set whose versions span more than that has a cluster on an unmaintained release.
	maxMinorSpread = 2
)

var versionsCheck = check{
	Check: Check{Name: "versions", Summary: "API server versions of the hub and every cluster, and the skew between them"},
	set:   checkHubVersion,
	member: func(ctx context.Context, e *env, m *member) []Finding {
		v, err := m.version.get(ctx)
		if err != nil {
			return []Finding{failure(fmt.Sprintf("check that %s is the cluster's kubeconfig and that its API server runs and is reachable from here", m.source),
				"the API server at %s does not answer: %v; no other check can read this cluster", hostOf(m.cfg.Host), err)}
		}
		return []Finding{judgeVersion(v, memberMinMinor,
			"join cannot discover this cluster's service CIDRs (no networking.k8s.io/v1 ServiceCIDR before Kubernetes 1.33)",
			"pass --service-cidr to `octopus join`, or upgrade the cluster")}
	},
}

// checkHubVersion judges the hub's version and the spread of versions across the set.
func checkHubVersion(ctx context.Context, e *env) []Finding {
	var out []Finding
	minors := map[string]int{}
	hv, err := e.hub.version.get(ctx)
	if err != nil {
		out = append(out, aboutHub(notChecked("the hub's version", err, "hub-access")))
	} else {
		f := judgeVersion(hv, hubMinMinor,
			"the hub cannot serve the admission policy that keeps clusters from writing each other's objects (admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, Kubernetes 1.30)",
			"upgrade the hub's Kubernetes")
		out = append(out, aboutHub(f))
		if minor, known := minorOf(hv); known {
			minors[HubName] = minor
		}
	}
	for _, m := range e.members {
		if v, err := m.version.get(ctx); err == nil {
			if minor, known := minorOf(v); known {
				minors[m.name()] = minor
			}
		}
	}
	return append(out, judgeSpread(minors))
}

// judgeVersion reports a server's version, failing it below minMinor with the consequence and
// the fix given.
func judgeVersion(v *version.Info, minMinor int, consequence, fix string) Finding {
	minor, known := minorOf(v)
	switch {
	case !known:
		return info("Kubernetes %s: not a version this check can compare (major %q, minor %q)", v.GitVersion, v.Major, v.Minor)
	case minor < minMinor:
		return failure(fix, "Kubernetes %s is older than 1.%d: %s", v.GitVersion, minMinor, consequence)
	}
	// Builds from source without version stamping report v0.0.0-master; the minor is right.
	return ok("Kubernetes 1.%d (%s)", minor, v.GitVersion)
}

// judgeSpread compares the minor versions of the set's API servers, by cluster name.
func judgeSpread(minors map[string]int) Finding {
	if len(minors) == 0 {
		return info("no API server answered, so the version skew is unknown")
	}
	names := make([]string, 0, len(minors))
	for n := range minors {
		names = append(names, n)
	}
	slices.Sort(names)
	lo, hi := names[0], names[0]
	for _, n := range names {
		if minors[n] < minors[lo] {
			lo = n
		}
		if minors[n] > minors[hi] {
			hi = n
		}
	}
	if minors[hi]-minors[lo] > maxMinorSpread {
		return warning(fmt.Sprintf("upgrade %s (and any other cluster below 1.%d)", lo, minors[hi]-maxMinorSpread),
			"the set spans Kubernetes 1.%d (%s) to 1.%d (%s): more than the %d minor releases the Kubernetes project maintains at once, so %s runs an unmaintained release",
			minors[lo], lo, minors[hi], hi, maxMinorSpread+1, lo)
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s 1.%d", n, minors[n]))
	}
	return ok("versions within %d minor releases: %s", maxMinorSpread, strings.Join(parts, ", "))
}

// minorOf reads the minor version; providers append "+" (GKE's "37+").
func minorOf(v *version.Info) (int, bool) {
	if v == nil || v.Major != "1" {
		return 0, false
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	return minor, err == nil
}

// aboutHub makes f a finding about the hub.
func aboutHub(f Finding) Finding {
	f.Cluster = HubName
	return f
}
