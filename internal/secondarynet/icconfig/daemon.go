package icconfig

// The member's ovn-ic pod (charts/octopus-member/templates/ovn-ic.yaml, octopus-ovn-ic): the
// command lines of its programs, here so that the chart's test holds the chart to them and
// the test that runs them on real daemons (internal/manifests/render, TestMemberOVNICOverTLS)
// runs exactly these.
//
// ovn-ic has one set of TLS options for all four of its connections, while its own cluster's
// NB and SB trust only the member's OVN CA and the hub's IC databases only the hub's IC CA; no
// certificate is signed by both. So ovn-ic holds the cluster's IC certificate and talks ssl:
// to every IC database member itself (ICNB, ICSB), and reaches its own cluster's databases
// through `octopus-ovn db-proxy` in the same pod (internal/datapath/ovn/dbproxy), which holds
// the pod's certificate of the member's CA. An OVSDB relay on the IC side was tried and does
// not work: OVN 23.03's ovn-ic wants a raft leader and refuses a relay server.
const (
	// TLSDir is where the pod mounts the cluster's IC client certificate (the Secret join
	// fills from the hub's signer: tls.key, tls.crt, ca.crt).
	TLSDir = "/etc/ovn/ic-tls"
	// LocalTLSDir is where it mounts its certificate for its own cluster's OVN databases.
	LocalTLSDir = "/etc/ovn/tls"
	// RunDir is the pod's shared directory (an emptyDir): the proxy's sockets, ovn-ic's
	// control socket and the IC endpoints file.
	RunDir = "/var/run/ovn-ic"
)

// LocalSockets are the proxy's sockets in runDir for the cluster's NB and SB.
func LocalSockets(runDir string) (nb, sb string) { return runDir + "/nb.sock", runDir + "/sb.sock" }

// ProxyCommand is the proxy's command line: the cluster's NB and SB (localNB, localSB,
// "ssl:HOST:PORT") behind LocalSockets(runDir), with the certificate in localTLSDir.
func ProxyCommand(localNB, localSB, localTLSDir, runDir string) []string {
	nb, sb := LocalSockets(runDir)
	return []string{"octopus-ovn", "db-proxy",
		"--route=unix:" + nb + "=" + localNB,
		"--route=unix:" + sb + "=" + localSB,
		"--private-key=" + localTLSDir + "/tls.key",
		"--certificate=" + localTLSDir + "/tls.crt",
		"--ca-cert=" + localTLSDir + "/ca.crt",
	}
}

// EndpointsFile is where, in runDir, the icmaster of each replica writes the IC endpoints it
// read from ovn-ic-config (ic-db-host, ic-nb-port, ic-sb-port) and the ovn-ic container's
// supervisor reads them: ovn-ic takes its IC databases only on its command line, so a changed
// ic-db-host reaches it by a restart in place (ovnic.Supervisor), not by a new pod.
func EndpointsFile(runDir string) string { return runDir + "/ic-endpoints.json" }

// SupervisorCommand is the ovn-ic container's command line: `octopus-ovn ic-supervisor`, which
// starts ovn-ic (OVNICCommand) on the IC endpoints of EndpointsFile(runDir) and restarts it
// when they change. The endpoints are not on this line: ovn-ic-config is their only source.
func SupervisorCommand(tlsDir, runDir string) []string {
	return append([]string{"octopus-ovn", "ic-supervisor", "--endpoints-file=" + EndpointsFile(runDir), "--"},
		OVNICCommand(tlsDir, runDir)...)
}

// ProbeCommand is the ovn-ic container's liveness probe: ovn-ic answering on its control
// socket in runDir, or the supervisor still waiting for the endpoints file (no ovn-ic yet, and
// restarting the container would not bring one).
func ProbeCommand(runDir string) []string {
	return []string{"octopus-ovn", "ic-probe", "--endpoints-file=" + EndpointsFile(runDir), "--",
		"ovn-appctl", "-t", runDir + "/ovn-ic.ctl", "version"}
}

// OVNICCommand is ovn-ic's command line without its IC databases, which the supervisor appends
// (--ic-nb-db, --ic-sb-db: ssl:, every raft member) from the endpoints file: the IC
// certificate in tlsDir, its own cluster's databases through the proxy in runDir.
func OVNICCommand(tlsDir, runDir string) []string {
	nb, sb := LocalSockets(runDir)
	return []string{"ovn-ic",
		"--ovnnb-db=unix:" + nb,
		"--ovnsb-db=unix:" + sb,
		"--private-key=" + tlsDir + "/tls.key",
		"--certificate=" + tlsDir + "/tls.crt",
		"--ca-cert=" + tlsDir + "/ca.crt",
		"--unixctl=" + runDir + "/ovn-ic.ctl",
		"-vconsole:info", "-vsyslog:off", "-vfile:off",
	}
}
