package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/octopus-mcs/octopus/internal/lab/cni"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
)

// flannelReadyTimeout bounds the wait for flanneld to write the node's subnet file: it must
// reach the API server, read its Node and set up its VXLAN device first.
const flannelReadyTimeout = time.Minute

// Files of flanneld under the node's directory.
const (
	dirFlannel           = "flannel"
	fileFlannelKubecfg   = dirFlannel + "/kubeconfig"
	fileFlannelNetConf   = dirFlannel + "/net-conf.json"
	fileFlannelSubnetEnv = dirFlannel + "/subnet.env"
)

func flanneldName(node string) string { return node + "-flanneld" }

// startFlanneld starts flanneld in the node's network namespace, as kube-flannel's DaemonSet
// runs it in a hostNetwork pod, with a client certificate of cni.FlannelGroup (the lab grants
// it cni.FlannelRBAC), and returns the subnet file once flanneld has written it. flanneld
// needs nothing of the node's mount namespace: its files are under the node's directory,
// which the CNI plugin reads from inside the namespace at the same path.
func (n *Node) startFlanneld(ctx context.Context) (string, error) {
	o := n.opts
	if err := os.MkdirAll(n.path(dirFlannel), 0o700); err != nil {
		return "", err
	}
	cert, key, err := o.Cluster.IssueClient("octopus-lab:flannel:"+n.Name, []string{cni.FlannelGroup})
	if err != nil {
		return "", err
	}
	files := cni.FlanneldFiles{
		Kubeconfig: n.path(fileFlannelKubecfg), NetConf: n.path(fileFlannelNetConf), SubnetFile: n.path(fileFlannelSubnetEnv),
	}
	if err := controlplane.WriteKubeconfig(files.Kubeconfig, o.Cluster.Name, o.Cluster.URL, o.Cluster.CAData, "flanneld",
		&clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}); err != nil {
		return "", err
	}
	netConf, err := cni.FlannelNetConf(o.Cluster.PodCIDR)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(files.NetConf, netConf, 0o600); err != nil {
		return "", err
	}
	// flanneld finds its Node by NODE_NAME (or by its pod, which it has not); the supervisor
	// passes no environment of its own, so env sets it.
	env, err := exec.LookPath("env")
	if err != nil {
		return "", fmt.Errorf("starting flanneld needs env (Debian package coreutils): %w", err)
	}
	args := append([]string{"NODE_NAME=" + n.Name, filepath.Join(o.FlannelBinDir, controlplane.BinFlanneld)},
		cni.FlanneldArgs(files, o.Node.LANAddr.Addr().String())...)
	if err := o.Env.StartProcess(controlplane.ProcessOptions{
		Name: flanneldName(n.Name), Binary: env, Args: args, Netns: o.Node.NetnsPath(), RestartOnCrash: true,
	}); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, flannelReadyTimeout)
	defer cancel()
	for {
		if _, err := os.Stat(files.SubnetFile); err == nil {
			return files.SubnetFile, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("flanneld did not write %s within %s (see the log of %s)", files.SubnetFile, flannelReadyTimeout, flanneldName(n.Name))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
