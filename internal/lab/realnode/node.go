// Package realnode runs a lab node as a real Kubernetes node: containerd (with NRI) and a
// kubelet registered with the cluster's API server, inside the node's network namespace and a
// private mount namespace of the node, with runc and the reference CNI plugins. Every process
// is a supervised child of the lab's controlplane.Environment (pidfiles, logs, Pdeathsig,
// restarts); containerd and the pods live in the lab's cgroup (cgroup.go), so `lab down`
// finds every process of the node also after a crash.
package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/octopus-mcs/octopus/internal/lab/cni"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/mountns"
)

// Timeouts of a node's start; a loaded 2-core machine starting several nodes is slow.
const (
	mountsReadyTimeout     = 30 * time.Second
	containerdReadyTimeout = 60 * time.Second
	importTimeout          = 5 * time.Minute
)

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// NodesDir is the directory, under the lab dir, with a directory per real node.
const NodesDir = "nodes"

// Options configure Start. All are required unless marked optional.
type Options struct {
	// Env supervises the node's processes; its Dir holds the node's directory.
	Env *controlplane.Environment
	// Cluster is the control plane the kubelet registers with.
	Cluster *controlplane.ControlPlane
	// Node is the node's network.
	Node labnet.NodeNet
	// LabID names the lab's cgroup.
	LabID string
	// KubeBinDir has the kubelet; ContainerdBinDir containerd, its shim and ctr
	// (controlplane.EnsureNodeRuntime).
	KubeBinDir, ContainerdBinDir string
	// Images are image tarballs (internal/lab/images) imported into the node's containerd
	// before the kubelet starts. Optional.
	Images []string
	// ClusterDNS are the kube-dns Service's addresses, the nameservers of pods' resolv.conf:
	// one per family of a dual-stack cluster, the primary family's first.
	ClusterDNS []netip.Addr
	// Mirror is the address of a registry (images.Registry) that containerd uses instead of
	// each of Registries, so that images are pulled from it and never from outside the
	// machine. Optional.
	Mirror     string
	Registries []string
	// Labels are the Node's labels besides the kubelet's own. Optional.
	Labels map[string]string
	// ContainerEnv is set in every container of the node by the lab's NRI plugin
	// (envPlugin). Optional.
	ContainerEnv map[string]string
	// CNI is the node's CNI setup: cni.Bridge (the default) or cni.Flannel. Optional.
	CNI string
	// FlannelBinDir has flanneld and the flannel CNI plugin (controlplane.EnsureFlannel).
	// Required with cni.Flannel.
	FlannelBinDir string
	// Log receives structured logs. Optional.
	Log logr.Logger
}

// Node is a started real node.
type Node struct {
	// Name is the Kubernetes Node name.
	Name string
	// Dir is the node's directory (state, configuration, certificates).
	Dir  string
	opts Options
}

// Process names of a node, as given to Environment.StartProcess.
func holderName(node string) string     { return node + "-mounts" }
func containerdName(node string) string { return node + "-containerd" }
func kubeletName(node string) string    { return node + "-kubelet" }

// Directories of a node under Dir.
const (
	dirKubelet         = "kubelet"     // bind-mounted at kubeletRootPath
	dirCNIState        = "cni"         // at cniStatePath
	dirRun             = "run"         // at containerdRunPath
	dirOVS             = "openvswitch" // at ovsRunPath
	dirNetns           = "netns"       // at netnsRunPath
	dirContainerLogs   = "logs/containers"
	dirPodLogs         = "logs/pods"
	dirContainerdRoot  = "containerd"
	dirCNIConf         = "net.d"
	dirNRIPlugins      = "nri/plugins"
	dirNRIConf         = "nri/conf"
	dirPKI             = "pki"
	dirScratch         = "scratch" // the tmpfs of overlays the mount namespace needs
	dirRegistryHosts   = "certs.d" // containerd's registry config_path: <host>/hosts.toml
	fileContainerdConf = "containerd.toml"
	fileKubeletConf    = "kubelet.json"
	fileKubeconfig     = "kubelet.kubeconfig"
)

// Start prepares the node's directories, certificates and configuration, starts the holder
// of its mount namespace, containerd, imports the images and starts the kubelet, which
// registers the Node. The pod network comes later (ConfigureNetwork), once node IPAM has
// given the Node its pod CIDR.
func Start(ctx context.Context, o Options) (*Node, error) {
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	n := &Node{Name: o.Node.Name, Dir: filepath.Join(o.Env.Dir, NodesDir, o.Node.Name), opts: o}
	if err := n.start(ctx); err != nil {
		return nil, fmt.Errorf("starting real node %s: %w", n.Name, err)
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	o := n.opts
	if err := checkOutsideOverlays(n.Dir); err != nil {
		return err
	}
	for _, d := range []string{dirKubelet, dirCNIState, dirRun, dirOVS, dirNetns, dirContainerLogs, dirPodLogs, dirContainerdRoot, dirCNIConf, dirNRIPlugins, dirNRIConf, dirPKI, dirScratch} {
		if err := os.MkdirAll(n.path(d), 0o700); err != nil {
			return err
		}
	}
	if err := n.writeFiles(); err != nil {
		return err
	}
	cgroup := nodeCgroup(o.LabID, n.Name)
	if err := ensureCgroup(cgroup); err != nil {
		return err
	}
	holder, err := n.startMountNamespace(ctx)
	if err != nil {
		return err
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("a real node needs nsenter (Debian package util-linux): %w", err)
	}
	enter := func(binary string, args ...string) (string, []string) {
		return nsenter, append([]string{"--mount=/proc/" + strconv.Itoa(holder) + "/ns/mnt", "--", binary}, args...)
	}
	bin, args := enter(filepath.Join(o.ContainerdBinDir, controlplane.BinContainerd), "--config", n.path(fileContainerdConf))
	if err := o.Env.StartProcess(controlplane.ProcessOptions{
		Name: containerdName(n.Name), Binary: bin, Args: args, Netns: o.Node.NetnsPath(), RestartOnCrash: true,
	}); err != nil {
		return err
	}
	if err := n.waitContainerd(ctx); err != nil {
		return err
	}
	if err := n.importImages(ctx); err != nil {
		return err
	}
	if err := n.startEnvPlugin(ctx, o.ContainerEnv); err != nil {
		return err
	}
	bin, args = enter(filepath.Join(o.KubeBinDir, controlplane.BinKubelet),
		"--config="+n.path(fileKubeletConf),
		"--kubeconfig="+n.path(fileKubeconfig),
		"--cert-dir="+n.path(dirPKI),
		"--hostname-override="+n.Name,
		"--node-ip="+nodeIPs(o.Node),
		"--node-labels="+nodeLabelsArg(o.Labels),
		// Two dead runs of each container, not one: between the restarts of a crash-looping
		// container its current run is dead too, and `kubectl logs --previous` wants the
		// one before (there is no configuration field for it).
		"--maximum-dead-containers-per-container=2",
		"--v=2",
	)
	return o.Env.StartProcess(controlplane.ProcessOptions{
		Name: kubeletName(n.Name), Binary: bin, Args: args, Netns: o.Node.NetnsPath(), RestartOnCrash: true,
	})
}

func (n *Node) path(rel string) string { return filepath.Join(n.Dir, rel) }

// ContainerdSocket is the node's containerd socket as seen from outside its mount namespace.
func (n *Node) ContainerdSocket() string { return n.path(filepath.Join(dirRun, "containerd.sock")) }

// NRISocket is the node's NRI socket as seen from outside its mount namespace: NRI plugins
// connect there.
func (n *Node) NRISocket() string { return NRISocketPath(filepath.Dir(filepath.Dir(n.Dir)), n.Name) }

// NRISocketPath is the NRI socket of the real node named node of the lab in labDir, as seen
// from outside the node's mount namespace.
func NRISocketPath(labDir, node string) string {
	return filepath.Join(labDir, NodesDir, node, dirRun, filepath.Base(nriSocket))
}

// OVSDir is the Open vSwitch directory (/run/openvswitch inside the node: the database and
// sockets of the secondary network's node pod) of the real node named node of the lab in
// labDir, as seen from outside the node's mount namespace: ovs-vsctl --db=unix:<OVSDir>/db.sock
// reads the node's switch.
func OVSDir(labDir, node string) string {
	return filepath.Join(labDir, NodesDir, node, dirOVS)
}

// netnsRunPath is where named network namespaces live inside a node (`ip netns`'s
// directory): the member chart's gateway-port keeps each VPC gateway's namespace there
// (--vpc-netns-dir). Each node has its own, bound over it from its directory. Otherwise it
// would be the host's, where the host has every mount point of mounts (mountns.Ops overlays
// /run only for one it lacks): two gateway nodes would keep octvpc-<vpc> at one path, the
// node that lets a VPC's gateway go would unlink the file, and the kernel would then unmount
// the copy the other node holds there in its own mount namespace, the new gateway's; and a
// crashed lab would leave octvpc-* in the host's `ip netns list`. (Pods' namespaces are not
// here: containerd keeps them under its state directory, config.go.)
const netnsRunPath = "/run/netns"

// NetnsDir is the directory of named network namespaces (/run/netns inside the node) of the
// real node named node of the lab in labDir, as seen from outside the node's mount namespace:
// it lists the names, and the namespaces themselves are mounted on them only inside the
// node's mount namespace (a process of the node reaches them at
// /proc/<pid>/root/run/netns/<name>).
func NetnsDir(labDir, node string) string {
	return filepath.Join(labDir, NodesDir, node, dirNetns)
}

// OVSRunPath is Open vSwitch's directory inside a node: the member chart's
// secondaryNetwork.node.ovsDir on the lab's nodes.
const OVSRunPath = ovsRunPath

// NRISocketInNode is containerd's NRI socket inside a node: the member chart's
// secondaryNetwork.nri.socket on the lab's nodes.
const NRISocketInNode = nriSocket

// checkOutsideOverlays refuses a node directory below a directory that the mount namespace
// overlays (mountns.Ops does for the mount points the host lacks): inside the namespace its
// files would be the overlay's, and writes would land in a tmpfs.
func checkOutsideOverlays(dir string) error {
	for _, p := range []string{"/var/lib", "/var/log", "/run", "/var/run"} {
		if dir == p || strings.HasPrefix(dir, p+"/") {
			return fmt.Errorf("the lab's directory %s is under %s, which a real node's mount namespace overlays; use a directory elsewhere", dir, p)
		}
	}
	return nil
}

// writeFiles writes the certificates, kubeconfig and configuration of containerd and the
// kubelet.
func (n *Node) writeFiles() error {
	o := n.opts
	cp := o.Cluster
	clientCert, clientKey, err := cp.IssueClient("system:node:"+n.Name, []string{"system:nodes"})
	if err != nil {
		return err
	}
	ips := []netip.Addr{o.Node.LANAddr.Addr()}
	if o.Node.LANAddr6.IsValid() {
		ips = append(ips, o.Node.LANAddr6.Addr())
	}
	servingCert, servingKey, err := cp.IssueKubeletServing(ips)
	if err != nil {
		return err
	}
	caFile := n.path(filepath.Join(dirPKI, "ca.crt"))
	certFile := n.path(filepath.Join(dirPKI, "kubelet.crt"))
	keyFile := n.path(filepath.Join(dirPKI, "kubelet.key"))
	for path, data := range map[string][]byte{caFile: cp.CAData, certFile: servingCert, keyFile: servingKey} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	if err := controlplane.WriteKubeconfig(n.path(fileKubeconfig), cp.Name, cp.URL, cp.CAData, "system:node:"+n.Name,
		&clientcmdapi.AuthInfo{ClientCertificateData: clientCert, ClientKeyData: clientKey}); err != nil {
		return err
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("a real node needs runc: install Debian package runc (hack/install-deps.sh): %w", err)
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		return fmt.Errorf("a real node needs the CNI plugins: install Debian package containernetworking-plugins (hack/install-deps.sh): %w", err)
	}
	if o.CNI == cni.Flannel {
		if _, err := os.Stat(filepath.Join(o.FlannelBinDir, controlplane.BinFlannelCNI)); err != nil {
			return fmt.Errorf("the flannel CNI needs flanneld and its CNI plugin (controlplane.EnsureFlannel, hack/flannel.sh): %w", err)
		}
	}
	for _, host := range o.Registries {
		hosts, err := images.HostsTOML(host, o.Mirror)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(n.path(filepath.Join(dirRegistryHosts, host)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(n.path(filepath.Join(dirRegistryHosts, host, "hosts.toml")), []byte(hosts), 0o644); err != nil {
			return err
		}
	}
	containerd := containerdConfig{
		Root: n.path(dirContainerdRoot), Cgroup: nodeCgroup(o.LabID, n.Name) + "/containerd",
		RegistryConfigDir: n.path(dirRegistryHosts),
		CNIConfDir:        n.path(dirCNIConf), CNIBinDirs: n.cniBinDirs(), Runc: runc,
		NRIPluginDir: n.path(dirNRIPlugins), NRIConfigDir: n.path(dirNRIConf),
	}
	if err := os.WriteFile(n.path(fileContainerdConf), []byte(containerd.render()), 0o600); err != nil {
		return err
	}
	kubelet, err := kubeletConfig{
		Address: o.Node.LANAddr.Addr(), ClientCAFile: caFile, TLSCertFile: certFile, TLSKeyFile: keyFile,
		CgroupRoot: nodeCgroup(o.LabID, n.Name), ClusterDNS: o.ClusterDNS,
	}.render()
	if err != nil {
		return err
	}
	return os.WriteFile(n.path(fileKubeletConf), kubelet, 0o600)
}

// mounts are the node's bind mounts over the paths a kubelet and containerd hard-code.
func (n *Node) mounts() []mountns.Bind {
	return []mountns.Bind{
		{Src: n.path(dirKubelet), Target: kubeletRootPath},
		{Src: n.path(dirCNIState), Target: cniStatePath},
		{Src: n.path(dirRun), Target: containerdRunPath},
		{Src: n.path(dirOVS), Target: ovsRunPath},
		{Src: n.path(dirNetns), Target: netnsRunPath},
		{Src: n.path(dirContainerLogs), Target: containerLogsPath},
		{Src: n.path(dirPodLogs), Target: podLogsPath},
	}
}

// startMountNamespace starts the holder of the node's mount namespace and returns its PID
// once every mount is made: the script execs sleep only after the last one.
func (n *Node) startMountNamespace(ctx context.Context) (int, error) {
	ops, err := mountns.Ops(n.mounts(), n.path(dirScratch))
	if err != nil {
		return 0, err
	}
	// Shared propagation inside the namespace (its own peer groups, none with the host): the
	// kubelet's Bidirectional mounts need it.
	ops = append(ops, "rshared")
	var tools [2]string
	for i, t := range []string{"unshare", "sh"} {
		if tools[i], err = exec.LookPath(t); err != nil {
			return 0, fmt.Errorf("a real node's mount namespace needs %s (Debian package util-linux): %w", t, err)
		}
	}
	name := holderName(n.Name)
	err = n.opts.Env.StartProcess(controlplane.ProcessOptions{
		Name: name, Binary: tools[0], Netns: n.opts.Node.NetnsPath(),
		Args: append([]string{"--mount", "--propagation", "private", "--", tools[1], "-c", mountns.Script, "sh"}, ops...),
	})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, mountsReadyTimeout)
	defer cancel()
	for {
		pid, err := n.opts.Env.ProcessPID(name)
		if err != nil {
			return 0, fmt.Errorf("the holder of the mount namespace failed (see its log): %w", err)
		}
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "sleep" {
			return pid, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the mount namespace was not ready in %s (see the log of %s)", mountsReadyTimeout, name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitContainerd waits until containerd accepts connections on its socket.
func (n *Node) waitContainerd(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, containerdReadyTimeout)
	defer cancel()
	for {
		c, err := net.DialTimeout("unix", n.ContainerdSocket(), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd did not listen on %s within %s (see the log of %s): %w", n.ContainerdSocket(), containerdReadyTimeout, containerdName(n.Name), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// importImages imports the image tarballs into containerd's k8s.io namespace, where the
// kubelet's CRI finds them, unpacked for the overlayfs snapshotter.
func (n *Node) importImages(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	for _, tarball := range n.opts.Images {
		out, err := n.Ctr(ctx, "images", "import", tarball)
		if err != nil {
			return fmt.Errorf("importing %s: %w: %s", tarball, err, out)
		}
	}
	return nil
}

// Ctr runs ctr against the node's containerd in the k8s.io namespace (the kubelet's) and
// returns its combined output.
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	ctr := filepath.Join(n.opts.ContainerdBinDir, controlplane.BinCtr)
	cmd := exec.CommandContext(ctx, ctr, append([]string{"--address", n.ContainerdSocket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// ConfigureNetwork gives the node its pod network once node IPAM has given it podCIDR: with
// cni.Bridge it writes the bridge configuration for podCIDR; with cni.Flannel it starts
// flanneld (startFlanneld), which takes the pod CIDR from the Node itself, and writes
// flannel's configuration once flanneld has written the node's subnet. containerd picks the
// configuration up and the node becomes Ready.
//
// podCIDRs are the Node's spec.podCIDRs: an IPv4 one, and an IPv6 one on a dual-stack node
// (the bridge then gives pods an address of each family; flannel's setup is IPv4 only).
func (n *Node) ConfigureNetwork(ctx context.Context, podCIDRs []netip.Prefix) error {
	var conf []byte
	var err error
	switch n.opts.CNI {
	case cni.Flannel:
		var subnetFile string
		if subnetFile, err = n.startFlanneld(ctx); err == nil {
			conf, err = cni.FlannelConfig(subnetFile, n.path(filepath.Join(dirCNIState, "flannel")))
		}
	default:
		conf, err = cni.BridgeConfig(podCIDRs, n.path(filepath.Join(dirCNIState, "networks")))
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	path := n.path(filepath.Join(dirCNIConf, cni.ConfigFile))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, conf, 0o644); err != nil {
		return fmt.Errorf("node %s: writing the CNI configuration: %w", n.Name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("node %s: writing the CNI configuration: %w", n.Name, err), os.Remove(tmp))
	}
	return nil
}

// CNIConfigPath is the node's CNI network configuration as seen from outside its mount
// namespace.
func (n *Node) CNIConfigPath() string { return n.path(filepath.Join(dirCNIConf, cni.ConfigFile)) }

// cniBinDirs are the directories of the node's CNI plugins: Debian's, and with cni.Flannel
// the flannel plugin's, which finds the bridge and host-local plugins it delegates to in the
// same list (containerd passes it as CNI_PATH).
func (n *Node) cniBinDirs() []string {
	if n.opts.CNI == cni.Flannel {
		return []string{cniBinDir, n.opts.FlannelBinDir}
	}
	return []string{cniBinDir}
}

// nodeIPs is the kubelet's --node-ip: the node's LAN address, and on a dual-stack node its
// IPv6 one after it, so that the Node's InternalIPs are of both families with IPv4 first (the
// API server reaches the kubelet at the first; the route agents route each family's remote
// CIDRs via the gateway node's address of that family).
func nodeIPs(n labnet.NodeNet) string {
	if n.LANAddr6.IsValid() {
		return n.LANAddr.Addr().String() + "," + n.LANAddr6.Addr().String()
	}
	return n.LANAddr.Addr().String()
}
