package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// serviceAccountIssuer is the iss claim of ServiceAccount tokens; the conventional in-cluster
// URL, as kubeadm uses. Clusters differ by signing key, so tokens never cross clusters.
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// Identities in the client certificates. system:masters bypasses authorization, which is what
// an admin kubeconfig of a disposable cluster is for.
const (
	adminUser          = "octopus-admin"
	kubeletClientUser  = KubeletClientUser
	groupSystemMasters = "system:masters"
)

// KubeletClientUser is the user (certificate CommonName) kube-apiserver presents to kubelets,
// --kubelet-client-certificate: the lab's kubelets serve exec and logs to it.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// KubeletPort is the kubelet's secure port, where the API server reaches exec, attach and
// containerLogs of a node (Node status.daemonEndpoints.kubeletEndpoint).
const KubeletPort = 10250

// Files in a cluster's directory (<Dir>/clusters/<name>).
const (
	fileCACert      = "ca.crt"
	fileCAKey       = "ca.key"
	fileServingCert = "apiserver.crt"
	fileServingKey  = "apiserver.key"
	fileKubeletCert = "apiserver-kubelet-client.crt"
	fileKubeletKey  = "apiserver-kubelet-client.key"
	fileSAKey       = "sa.key"
	fileSAPub       = "sa.pub"
	fileKubeconfig  = "admin.kubeconfig"
)

// Client rate limits of RESTConfig: client-go's default of 5 QPS makes tests that create many
// objects crawl, and these servers serve nobody else.
const (
	restConfigQPS   = 100
	restConfigBurst = 200
)

// ControlPlane is one cluster's control plane in an Environment: a kube-apiserver with its own
// etcd prefix, a kube-controller-manager and optionally a kube-scheduler.
type ControlPlane struct {
	// Name is the cluster name from ClusterOptions.
	Name string
	// URL is the API server's address, https://<BindAddress>:<port>. It stays the same across
	// StopAPIServer/StartAPIServer.
	URL string
	// Kubeconfig is the path of an admin kubeconfig (0600, certificates embedded) whose context
	// is named after the cluster.
	Kubeconfig string
	// CAData is the PEM-encoded cluster CA: it signed the API server's serving certificate and
	// the client certificates it accepts.
	CAData []byte
	// ServiceCIDR is the ClusterIP range.
	ServiceCIDR netip.Prefix
	// SecondaryServiceCIDR is the second ClusterIP range of a dual-stack API server; invalid when the
	// cluster is single-stack.
	SecondaryServiceCIDR netip.Prefix
	// PodCIDR is the range node-ipam allocates node pod CIDRs from.
	PodCIDR netip.Prefix
	// SecondaryPodCIDR is the second pod range of a dual-stack cluster (ClusterOptions);
	// invalid when the cluster is single-stack.
	SecondaryPodCIDR netip.Prefix

	env         *Environment
	dir         string
	ca          keyPair // signs kubelet serving certificates (IssueKubeletServing)
	adminCert   []byte
	adminKey    []byte
	readyClient *http.Client

	apiserver         *process
	controllerManager *process
	scheduler         *process // nil unless ClusterOptions.Scheduler
}

// newControlPlane writes the cluster's certificates and keys and prepares its processes. The
// API server's port and everything that depends on it are set by setPort.
func newControlPlane(env *Environment, o ClusterOptions) (*ControlPlane, error) {
	dir := filepath.Join(env.Dir, clustersDir, o.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	now := time.Now()
	ca, err := newCA(o.Name+"-ca", now)
	if err != nil {
		return nil, err
	}
	dnsNames, ips, err := apiServerSANs(env.bindAddr, o.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	serving, err := ca.issue(servingTemplate("kube-apiserver", dnsNames, ips, now))
	if err != nil {
		return nil, err
	}
	admin, err := ca.issue(clientTemplate(adminUser, []string{groupSystemMasters}, now))
	if err != nil {
		return nil, err
	}
	// The kubelets check this certificate when the API server streams exec and logs.
	kubeletClient, err := ca.issue(clientTemplate(kubeletClientUser, []string{groupSystemMasters}, now))
	if err != nil {
		return nil, err
	}
	saKey, saPub, err := newServiceAccountKey()
	if err != nil {
		return nil, err
	}
	adminKey, err := admin.KeyPEM()
	if err != nil {
		return nil, err
	}
	files := []struct {
		name string
		data []byte
		key  keyPair // written as PEM key if set
	}{
		{name: fileCACert, data: ca.CertPEM()},
		{name: fileCAKey, key: ca},
		{name: fileServingCert, data: serving.CertPEM()},
		{name: fileServingKey, key: serving},
		{name: fileKubeletCert, data: kubeletClient.CertPEM()},
		{name: fileKubeletKey, key: kubeletClient},
		{name: fileSAKey, data: saKey},
		{name: fileSAPub, data: saPub},
	}
	for _, f := range files {
		data := f.data
		if f.key.Key != nil {
			if data, err = f.key.KeyPEM(); err != nil {
				return nil, err
			}
		}
		// Everything 0600: the directory is private anyway, and the keys must be.
		if err := writeFileAtomic(filepath.Join(dir, f.name), data, 0o600); err != nil {
			return nil, err
		}
	}

	c := &ControlPlane{
		Name:                 o.Name,
		Kubeconfig:           filepath.Join(dir, fileKubeconfig),
		CAData:               ca.CertPEM(),
		ServiceCIDR:          o.ServiceCIDR,
		SecondaryServiceCIDR: o.SecondaryServiceCIDR,
		PodCIDR:              o.PodCIDR,
		SecondaryPodCIDR:     o.SecondaryPodCIDR,
		env:                  env,
		dir:                  dir,
		ca:                   ca,
		adminCert:            admin.CertPEM(),
		adminKey:             adminKey,
	}
	c.apiserver = env.newProcess(o.Name, binAPIServer)
	c.controllerManager = env.newProcess(o.Name, binControllerManager)
	c.controllerManager.args = c.controllerManagerArgs()
	c.controllerManager.restartOnCrash = true
	if o.Scheduler {
		c.scheduler = env.newProcess(o.Name, binScheduler)
		c.scheduler.restartOnCrash = true
		c.scheduler.args = []string{
			"--kubeconfig=" + c.Kubeconfig,
			"--secure-port=0", // no health port: nothing probes it, and it saves a port
			"--leader-elect=false",
		}
	}
	return c, nil
}

// setPort fixes the API server's port: URL, admin kubeconfig, readiness client and flags.
func (c *ControlPlane) setPort(port uint16) error {
	c.URL = "https://" + netip.AddrPortFrom(c.env.bindAddr, port).String()
	admin := &clientcmdapi.AuthInfo{ClientCertificateData: c.adminCert, ClientKeyData: c.adminKey}
	if err := WriteKubeconfig(c.Kubeconfig, c.Name, c.URL, c.CAData, c.Name+"-admin", admin); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(c.RESTConfig())
	if err != nil {
		return fmt.Errorf("building HTTP client for %s: %w", c.URL, err)
	}
	c.readyClient = hc
	c.apiserver.args = c.apiServerArgs(port)
	return nil
}

// apiServerArgs are the kube-apiserver flags (checked against v1.37.1 --help).
func (c *ControlPlane) apiServerArgs(port uint16) []string {
	f := func(name string) string { return filepath.Join(c.dir, name) }
	bind := c.env.bindAddr.String()
	args := []string{
		"--etcd-servers=" + c.env.etcdURL,
		"--etcd-prefix=/" + c.Name,
		"--bind-address=" + bind,
		"--advertise-address=" + bind,
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + f(fileServingCert),
		"--tls-private-key-file=" + f(fileServingKey),
		"--client-ca-file=" + f(fileCACert),
		"--kubelet-client-certificate=" + f(fileKubeletCert),
		"--kubelet-client-key=" + f(fileKubeletKey),
		// Every kubelet serves a certificate from the cluster CA (IssueKubeletServing), so the
		// API server verifies the node it streams exec and logs from.
		"--kubelet-certificate-authority=" + f(fileCACert),
		// Lab nodes have no DNS name the host could resolve; their InternalIP is on a LAN the
		// API server's namespace reaches through the lab's uplink.
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + f(fileSAPub),
		"--service-account-signing-key-file=" + f(fileSAKey),
		"--service-cluster-ip-range=" + c.serviceRanges(),
		"--authorization-mode=Node,RBAC",
		// As every production cluster: a kubelet may change only its own Node, and not set
		// labels under node-restriction.kubernetes.io/, which only an administrator can, so
		// that what such a label selects (issue 30: the gateway nodes) a node cannot claim.
		// Added to the default plugins, not replacing them.
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--profiling=false",
		// Without this a SIGTERM waits for every watch (controllers hold many) to end by
		// itself, up to the 60 s request timeout; with it the server closes them and clients
		// re-watch after a restart.
		"--shutdown-watch-termination-grace-period=2s",
		// Ignored while TLS files are given; set so nothing is ever written to /var/run/kubernetes.
		"--cert-dir=" + c.dir,
	}
	if c.env.bindAddr.IsLoopback() {
		// v1.37 refuses to put a loopback address into the endpoints of the default/kubernetes
		// Service ("cannot use public IP 127.0.0.1 with endpoint reconciler") and exits. Tests
		// on loopback run no pods that would use that Service; the lab binds a link address
		// and keeps the default lease reconciler.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	return args
}

// serviceRanges is the API server's --service-cluster-ip-range: the primary range, and the
// secondary one of a dual-stack cluster.
func (c *ControlPlane) serviceRanges() string {
	if c.SecondaryServiceCIDR.IsValid() {
		return c.ServiceCIDR.String() + "," + c.SecondaryServiceCIDR.String()
	}
	return c.ServiceCIDR.String()
}

// PodRanges is the cluster's pod range, and its secondary one of a dual-stack cluster, as
// --cluster-cidr takes them (kube-controller-manager, kube-proxy).
func (c *ControlPlane) PodRanges() string {
	if c.SecondaryPodCIDR.IsValid() {
		return c.PodCIDR.String() + "," + c.SecondaryPodCIDR.String()
	}
	return c.PodCIDR.String()
}

// controllerServiceRanges is kube-controller-manager's --service-cluster-ip-range: both
// families only when it allocates pod CIDRs of both (a dual-stack controller manager wants
// both flags dual), else the primary range, which is all node-ipam uses.
func (c *ControlPlane) controllerServiceRanges() string {
	if c.SecondaryPodCIDR.IsValid() {
		return c.serviceRanges()
	}
	return c.ServiceCIDR.String()
}

// controllerManagerArgs are the kube-controller-manager flags (checked against v1.37.1
// --help). The default controller set runs, including serviceaccount-token-controller, which
// fills Secrets of type kubernetes.io/service-account-token.
func (c *ControlPlane) controllerManagerArgs() []string {
	f := func(name string) string { return filepath.Join(c.dir, name) }
	return []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--secure-port=0", // no health port: nothing probes it, and it saves a port
		"--leader-elect=false",
		"--cluster-name=" + c.Name,
		"--service-account-private-key-file=" + f(fileSAKey),
		"--root-ca-file=" + f(fileCACert),
		"--use-service-account-credentials=true",
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + c.PodRanges(),
		"--service-cluster-ip-range=" + c.controllerServiceRanges(),
		// The cluster CA signs approved CSRs, so lab components can get certificates the API
		// server trusts.
		"--cluster-signing-cert-file=" + f(fileCACert),
		"--cluster-signing-key-file=" + f(fileCAKey),
	}
}

// start brings up the API server, retrying on a new port if another process took the probed
// one, waits for /readyz and then starts the controllers.
func (c *ControlPlane) start(ctx context.Context) error {
	begin := time.Now()
	for attempt := 1; ; attempt++ {
		port, err := freePort(c.env.bindAddr)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		if err := c.setPort(port); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		r, err := c.apiserver.start()
		if err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		err = c.waitAPIServer(ctx, r)
		if err == nil {
			break
		}
		if attempt < maxPortAttempts && isClosed(r.done) && addressInUse(c.apiserver.logPath) {
			c.env.log.Info("Port taken before kube-apiserver bound it, retrying with a new port", "cluster", c.Name, "port", port, "attempt", attempt)
			c.apiserver.forgetUnexpectedExits()
			continue
		}
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	c.env.progress.printf("%s: kube-apiserver ready at %s (%.1fs)", c.Name, c.URL, time.Since(begin).Seconds())

	// Controllers start only now: against a ready API server they need no retries, and on a
	// small machine they don't slow down the other clusters' API servers.
	for _, p := range []*process{c.controllerManager, c.scheduler} {
		if p == nil {
			continue
		}
		if _, err := p.start(); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		c.env.progress.printf("%s: %s started", c.Name, p.binaryName())
	}
	return nil
}

// waitAPIServer polls /readyz as admin until it returns 200.
func (c *ControlPlane) waitAPIServer(ctx context.Context, r *run) error {
	return c.apiserver.waitReady(ctx, r, apiServerReadyTimeout, func(ctx context.Context) error {
		return httpOK(ctx, c.readyClient, c.URL+"/readyz")
	})
}

// IssueKubeletServing returns a TLS serving certificate and key (PEM) signed by the cluster CA
// for the given node addresses, for a kubelet's API (realnode): the API server
// verifies it with --kubelet-certificate-authority.
func (c *ControlPlane) IssueKubeletServing(ips []netip.Addr) (certPEM, keyPEM []byte, err error) {
	kp, err := c.ca.issue(servingTemplate("lab-kubelet", nil, ips, time.Now()))
	if err != nil {
		return nil, nil, fmt.Errorf("cluster %s: issuing kubelet serving certificate: %w", c.Name, err)
	}
	keyPEM, err = kp.KeyPEM()
	if err != nil {
		return nil, nil, err
	}
	return kp.CertPEM(), keyPEM, nil
}

// IssueClient returns a TLS client certificate and key (PEM) signed by the cluster CA for
// user in groups, which the API server authenticates as that user: a real lab node's kubelet
// gets system:node:<name> in system:nodes this way.
func (c *ControlPlane) IssueClient(user string, groups []string) (certPEM, keyPEM []byte, err error) {
	kp, err := c.ca.issue(clientTemplate(user, groups, time.Now()))
	if err != nil {
		return nil, nil, fmt.Errorf("cluster %s: issuing client certificate for %s: %w", c.Name, user, err)
	}
	keyPEM, err = kp.KeyPEM()
	if err != nil {
		return nil, nil, err
	}
	return kp.CertPEM(), keyPEM, nil
}

// RESTConfig returns a new admin client configuration (client certificate in system:masters).
// Callers may modify it.
func (c *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: c.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   bytes.Clone(c.CAData),
			CertData: bytes.Clone(c.adminCert),
			KeyData:  bytes.Clone(c.adminKey),
		},
		QPS:   restConfigQPS,
		Burst: restConfigBurst,
	}
}

// StopAPIServer stops the API server gracefully (SIGTERM, SIGKILL after a grace period) and
// waits until it has exited. Controllers keep running and reconnect after StartAPIServer.
// Meant for fault-injection tests.
func (c *ControlPlane) StopAPIServer() error {
	return c.apiserver.stop(apiServerStopGrace)
}

// KillAPIServer kills the API server with SIGKILL and waits until it has exited, simulating a
// crash.
func (c *ControlPlane) KillAPIServer() error {
	return c.apiserver.stop(0)
}

// StartAPIServer starts the API server again after StopAPIServer or KillAPIServer, with the
// same port, certificates and flags, and waits for /readyz. It fails if the API server is
// running, or if another process took the port meanwhile (the error quotes the log).
func (c *ControlPlane) StartAPIServer(ctx context.Context) error {
	begin := time.Now()
	r, err := c.apiserver.start()
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	if err := c.waitAPIServer(ctx, r); err != nil {
		return fmt.Errorf("cluster %s: restarting kube-apiserver: %w", c.Name, err)
	}
	c.env.progress.printf("%s: kube-apiserver ready again (%.1fs)", c.Name, time.Since(begin).Seconds())
	return nil
}

// WriteKubeconfig writes, with mode 0600 and atomically, a kubeconfig of one context: cluster
// name at url with CA caPEM, and user with auth. Credentials are embedded, so it stays valid
// when read from a node namespace or another machine's view of the lab.
func WriteKubeconfig(path, name, url string, caPEM []byte, user string, auth *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = auth
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig for %s: %w", name, err)
	}
	return writeFileAtomic(path, data, 0o600)
}

// writeFileAtomic writes data to path with mode perm via a temporary file and rename, so a
// reader (a controller restarting) never sees half a file and the mode holds even if path
// existed with another one.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
