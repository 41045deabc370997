package lab_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// The VPC checks of TestSecondaryNetwork (issue 33), on the scenario lab.Options.Vpcs makes
// (internal/lab/vpcs.go): in both clusters Vpcs red and blue with identical subnets, an echo
// pod of each on every node, the pods on the k-th node of either VPC at one address.

// vpcPods are the lab's VPC echo pods by cluster and VPC, in node order, each with its net1
// address, which must be the one it asked for (lab.VpcEchoAddr) on its own VPC.
func vpcPods(ctx context.Context, t *testing.T, l *lab.Lab) map[string]map[string][]xpod {
	t.Helper()
	pods := map[string]map[string][]xpod{}
	for _, c := range l.Network.Clusters {
		cs := clientset(t, l.Env.Cluster(c.Name).Kubeconfig)
		pods[c.Name] = map[string][]xpod{}
		for _, vpc := range lab.VpcNames {
			for k, n := range c.Nodes {
				p, err := cs.CoreV1().Pods(vpc).Get(ctx, lab.VpcEchoPod(vpc, n.Name), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("the lab's echo pod of Vpc %s on %s: %v", vpc, n.Name, err)
				}
				a, onVpc, errVpc := podnet.FindVpc(p.Annotations)
				st, ok, err := podnet.Find(p.Annotations)
				if errVpc != nil || !onVpc || a.Vpc != vpc || err != nil || !ok || len(st.IPs) != 1 || st.IPs[0] != lab.VpcEchoAddr(k).String() {
					t.Fatalf("pod %s/%s of %s: VPC attachment %+v (%v, %v), net1 %+v (%v, %v); want Vpc %s at %s",
						vpc, p.Name, c.Name, a, onVpc, errVpc, st, ok, err, vpc, lab.VpcEchoAddr(k))
				}
				pods[c.Name][vpc] = append(pods[c.Name][vpc], xpod{cluster: c.Name, name: p.Name, node: n.Name,
					ip: lab.VpcEchoAddr(k), netns: podNetns(t, l.Network.ID, p)})
			}
		}
	}
	return pods
}

// checkVpcsReady checks that every lab Vpc is Ready with an external address inside its
// cluster's global CIDR, and that its gateway's namespace is on the active gateway's node, in
// that node's own namespace directory (realnode.NetnsDir) and mounted there, while the host's
// /run/netns holds no VPC gateway's namespace: with the nodes sharing the host's directory, a
// failover would unmount the new gateway's namespace (realnode's netnsRunPath).
func checkVpcsReady(ctx context.Context, t *testing.T, l *lab.Lab, hub client.Client) {
	for _, c := range l.Network.Clusters {
		mc := kubeClient(t, l.Env.Cluster(c.Name).Kubeconfig)
		global := globalCIDR(ctx, t, hub, c.Name)
		for _, vpc := range lab.VpcNames {
			ext := vpcExternalIP(ctx, t, mc, c.Name, vpc)
			if !global.Contains(ext) {
				t.Errorf("Vpc %s of %s has the external address %s, outside the cluster's global CIDR %s", vpc, c.Name, ext, global)
			}
		}
		active := activeGateway(ctx, t, l, c)
		for _, vpc := range lab.VpcNames {
			waitVpcGatewayOn(ctx, t, l, c, active.Name, vpc)
		}
	}
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), podport.VpcGatewayNetnsPrefix) {
			t.Errorf("the host's /run/netns holds %s: a VPC gateway's namespace outside its node's own directory", e.Name())
		}
	}
}

// vpcExternalIP is Vpc vpc's external address, once it is Ready and holds one.
func vpcExternalIP(ctx context.Context, t *testing.T, mc client.Client, cluster, vpc string) netip.Addr {
	t.Helper()
	var ext netip.Addr
	waitFor(t, time.Minute, fmt.Sprintf("Vpc %s of %s to be Ready with an external address", vpc, cluster), func() error {
		v := &v1alpha1.Vpc{}
		if err := mc.Get(ctx, client.ObjectKey{Name: vpc}, v); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(v.Status.Conditions, v1alpha1.VpcConditionReady) || v.Status.Gateway == nil {
			return fmt.Errorf("status %+v", v.Status)
		}
		var err error
		ext, err = netip.ParseAddr(v.Status.Gateway.ExternalIP)
		return err
	})
	return ext
}

// waitVpcGatewayOn waits until vpc's gateway namespace is in node's own namespace directory and
// mounted there: a network namespace at the path inside the node, seen through a process of
// the node's gateway-port pod, whose /run/netns is the node's. It returns that path, which
// opens the namespace from the host.
func waitVpcGatewayOn(ctx context.Context, t *testing.T, l *lab.Lab, c labnet.ClusterNet, node, vpc string) string {
	t.Helper()
	name := podport.VpcGatewayNetns(vpc)
	cs := clientset(t, l.Env.Cluster(c.Name).Kubeconfig)
	var path string
	waitFor(t, time.Minute, fmt.Sprintf("%s's gateway namespace %s on %s", vpc, name, node), func() error {
		if _, err := os.Lstat(realnode.NetnsDir(l.Env.Dir, node) + "/" + name); err != nil {
			return fmt.Errorf("not in the node's own directory: %w", err)
		}
		list, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=octopus-ovn-gateway-port", FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d gateway-port pods on %s, want 1", len(list.Items), node)
		}
		pids, err := realnode.PodProcesses(l.Network.ID, string(list.Items[0].UID))
		if err != nil {
			return err
		}
		// gateway-port's own process: the pod's pause process has no /run/netns of the node.
		i := slices.IndexFunc(pids, func(pid int) bool {
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			return err == nil && strings.Contains(string(cmdline), "gateway-port")
		})
		if i < 0 {
			return fmt.Errorf("no gateway-port process runs in %s (pids %v)", list.Items[0].Name, pids)
		}
		var fs unix.Statfs_t
		path = fmt.Sprintf("/proc/%d/root%s/%s", pids[i], podport.DefaultNetnsDir, name)
		if err := unix.Statfs(path, &fs); err != nil {
			return fmt.Errorf("not mounted in the node: %w", err)
		}
		if fs.Type != unix.NSFS_MAGIC {
			return fmt.Errorf("%s is no mounted network namespace (filesystem type %#x)", path, fs.Type)
		}
		return nil
	})
	return path
}

// globalCIDR is the global CIDR the hub allocated cluster id.
func globalCIDR(ctx context.Context, t *testing.T, hub client.Client, id string) netip.Prefix {
	t.Helper()
	cl := hubCluster(ctx, t, hub, id)
	p, err := netip.ParsePrefix(cl.Spec.GlobalCIDR)
	if err != nil {
		t.Fatalf("cluster %s's global CIDR %q: %v", id, cl.Spec.GlobalCIDR, err)
	}
	return p
}

// checkVpcIsolation checks, in every cluster, that each VPC's pods reach over net1 their own
// VPC's pods on the other nodes and only them: the other VPC's pods hold the very same
// addresses, and each answer names the pod that gave it (checkTCP), so an answer from a blue
// pod to a red client fails.
func checkVpcIsolation(t *testing.T, pods map[string]map[string][]xpod) {
	timeout := time.Minute
	for _, cluster := range slices.Sorted(maps.Keys(pods)) {
		for _, vpc := range lab.VpcNames {
			for _, src := range pods[cluster][vpc] {
				for _, dst := range pods[cluster][vpc] {
					if dst.node == src.node {
						continue
					}
					checkTCP(t, vpc+" -> "+vpc+" on another node over net1", src, dst, timeout)
					timeout = 30 * time.Second
				}
			}
		}
	}
}

// checkVpcsApart adds a blue pod at an address no red pod has, in the first cluster, and checks
// that blue's pods reach it over net1 and red's do not: red and blue never meet, even where
// nothing of red's own is in the way.
func checkVpcsApart(ctx context.Context, t *testing.T, l *lab.Lab, pods map[string]map[string][]xpod) {
	c := l.Network.Clusters[0]
	cs := clientset(t, l.Env.Cluster(c.Name).Kubeconfig)
	node, addr := c.Nodes[0].Name, lab.VpcEchoAddr(len(c.Nodes))
	p := lab.NewVpcEchoPod(c.Name, "blue", "blue-only", node, addr)
	if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	// Gone before the next check, which counts the VPCs' pods.
	defer func() {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Errorf("deleting pod %s/%s: %v", p.Namespace, p.Name, err)
			return
		}
		waitFor(t, 2*time.Minute, "pod blue/blue-only to be gone", func() error {
			_, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			return gone(err)
		})
	}()
	waitFor(t, 2*time.Minute, "pod blue/blue-only to run on Vpc blue", func() error {
		got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a, ok, err := podnet.FindVpc(got.Annotations)
		if err != nil {
			return err
		}
		if !ok || a.Vpc != "blue" || !podReady(got) {
			return fmt.Errorf("attachment %+v (found %v), phase %s", a, ok, got.Status.Phase)
		}
		return nil
	})
	only := xpod{cluster: c.Name, name: p.Name, node: node, ip: addr}
	for _, src := range pods[c.Name]["blue"] {
		checkTCP(t, "blue -> blue's own address over net1", src, only, time.Minute)
	}
	for _, src := range pods[c.Name]["red"] {
		if got, err := tryHTTPGet(src.netns, netip.AddrPortFrom(addr, 8080)); err == nil {
			t.Errorf("red pod %s reached %s, an address only Vpc blue holds: %q", src.name, addr, got)
		}
	}
}

// checkGatewayExIps checks that each lab VPC's gateway has its GatewayExIp in the other
// cluster, naming the gateway's external address and its own cluster's global CIDR, and
// measures how soon a new VPC's appears: Vpc green, made in the first cluster, must have its
// GatewayExIp in the second within 10 s (issue 33), and take it along when deleted, with its
// gateway's namespace.
func checkGatewayExIps(ctx context.Context, t *testing.T, l *lab.Lab, hub client.Client) {
	c1, c2 := l.Network.Clusters[0], l.Network.Clusters[1]
	for _, pair := range [][2]labnet.ClusterNet{{c1, c2}, {c2, c1}} {
		src, dst := pair[0], pair[1]
		smc, dmc := kubeClient(t, l.Env.Cluster(src.Name).Kubeconfig), kubeClient(t, l.Env.Cluster(dst.Name).Kubeconfig)
		global := globalCIDR(ctx, t, hub, src.Name)
		for _, vpc := range lab.VpcNames {
			ext := vpcExternalIP(ctx, t, smc, src.Name, vpc)
			waitGatewayExIP(ctx, t, dmc, vpc, src.Name, ext, global, 30*time.Second)
		}
	}

	mc1, mc2 := kubeClient(t, l.Env.Cluster(c1.Name).Kubeconfig), kubeClient(t, l.Env.Cluster(c2.Name).Kubeconfig)
	green := &v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: "green"}, Spec: v1alpha1.VpcSpec{Subnets: lab.VpcSubnets()}}
	start := time.Now()
	if err := mc1.Create(ctx, green); err != nil {
		t.Fatalf("creating Vpc green in %s: %v", c1.Name, err)
	}
	ext := vpcExternalIP(ctx, t, mc1, c1.Name, green.Name)
	waitGatewayExIP(ctx, t, mc2, green.Name, c1.Name, ext, globalCIDR(ctx, t, hub, c1.Name), 10*time.Second)
	took := time.Since(start)
	t.Logf("MEASURED Vpc green created in %s -> its GatewayExIp (%s) in %s: %.1fs", c1.Name, ext, c2.Name, took.Seconds())
	if took > 10*time.Second {
		t.Errorf("Vpc green's GatewayExIp reached %s %.1fs after the Vpc was made, want at most 10s", c2.Name, took.Seconds())
	}
	waitVpcGatewayOn(ctx, t, l, c1, activeGateway(ctx, t, l, c1).Name, green.Name)
	nb := centralNBOf(ctx, t, clientset(t, l.Env.Cluster(c1.Name).Kubeconfig), c1.Nodes[len(c1.Nodes)-1].Netns)
	if rows, err := vpcRows(ctx, nb, green.Name); err != nil || len(rows) == 0 {
		t.Fatalf("the NB database holds no row of Vpc green while it is Ready (%v)", err)
	}

	if err := mc1.Delete(ctx, green); err != nil {
		t.Fatalf("deleting Vpc green in %s: %v", c1.Name, err)
	}
	copyName := v1alpha1.GatewayExIpName(green.Name, c1.Name)
	waitFor(t, 30*time.Second, "Vpc green, its GatewayExIp in "+c2.Name+" and its gateway's namespace to be gone", func() error {
		if err := gone(mc1.Get(ctx, client.ObjectKey{Name: green.Name}, &v1alpha1.Vpc{})); err != nil {
			return fmt.Errorf("Vpc green in %s: %w", c1.Name, err)
		}
		if err := gone(mc2.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: copyName}, &v1alpha1.GatewayExIp{})); err != nil {
			return fmt.Errorf("GatewayExIp %s in %s: %w", copyName, c2.Name, err)
		}
		for _, n := range c1.Nodes {
			if _, err := os.Lstat(realnode.NetnsDir(l.Env.Dir, n.Name) + "/" + podport.VpcGatewayNetns(green.Name)); err == nil {
				return fmt.Errorf("green's gateway namespace is still on %s", n.Name)
			}
		}
		rows, err := vpcRows(ctx, nb, green.Name)
		if err != nil {
			return fmt.Errorf("reading Vpc green's NB rows: %w", err)
		}
		if len(rows) > 0 {
			return fmt.Errorf("the NB database still holds Vpc green's rows: %v", rows)
		}
		return nil
	})
}

// vpcRows lists the NB rows the ovnmaster made for vpc (external_ids octopus.io/vpc, the
// key every VPC row carries: internal/datapath/ovn/vpc.go), as "table uuid".
func vpcRows(ctx context.Context, nb func(context.Context, ...string) (string, error), vpc string) ([]string, error) {
	var rows []string
	for _, table := range []string{"Logical_Router", "Logical_Router_Port", "Logical_Router_Static_Route", "Logical_Switch", "Logical_Switch_Port", "NAT"} {
		out, err := nb(ctx, "--bare", "--columns=_uuid", "find", table, fmt.Sprintf("external_ids:%q=%q", owner.OVNKeyVPC, vpc))
		if err != nil {
			return nil, err
		}
		for _, id := range strings.Fields(out) {
			rows = append(rows, table+" "+id)
		}
	}
	return rows, nil
}

// waitGatewayExIP waits until cluster dst (mc) holds the GatewayExIp of gateway in cluster
// src naming ext and global, src's global CIDR, which must contain ext.
func waitGatewayExIP(ctx context.Context, t *testing.T, mc client.Client, gateway, src string, ext netip.Addr, global netip.Prefix, timeout time.Duration) {
	t.Helper()
	name := v1alpha1.GatewayExIpName(gateway, src)
	if !global.Contains(ext) {
		t.Fatalf("gateway %s of %s has the external address %s, outside the cluster's global CIDR %s", gateway, src, ext, global)
	}
	waitFor(t, timeout, fmt.Sprintf("GatewayExIp %s naming %s in %s", name, ext, global), func() error {
		g := &v1alpha1.GatewayExIp{}
		if err := mc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: name}, g); err != nil {
			return err
		}
		if g.Spec.ExternalIP != ext.String() || g.Spec.GlobalnetCIDR != global.String() {
			return fmt.Errorf("spec %+v", g.Spec)
		}
		return nil
	})
}

// checkShowVpcs checks that `octopus show vpcs` lists, in every cluster, the lab's Vpcs Ready
// with a pod on each node and their external addresses.
func checkShowVpcs(ctx context.Context, t *testing.T, l *lab.Lab, octopus string) {
	for _, c := range l.Network.Clusters {
		ext := vpcExternalIPs(ctx, t, l, c)
		out, err := exec.Command(octopus, "show", "vpcs", "--kubeconfig", l.Env.Cluster(c.Name).Kubeconfig, "-o", "json").Output()
		if err != nil {
			t.Fatalf("octopus show vpcs in %s: %v", c.Name, err)
		}
		var report struct {
			Vpcs []struct {
				Name       string             `json:"name"`
				Pods       int                `json:"pods"`
				ExternalIP string             `json:"externalIP"`
				Conditions []metav1.Condition `json:"conditions"`
			} `json:"vpcs"`
		}
		if err := json.Unmarshal(out, &report); err != nil {
			t.Fatalf("octopus show vpcs -o json in %s: %v: %s", c.Name, err, out)
		}
		var listed []string
		for _, v := range report.Vpcs {
			listed = append(listed, v.Name)
			if slices.Contains(lab.VpcNames, v.Name) && (v.Pods != len(c.Nodes) || v.ExternalIP != ext[v.Name].String() ||
				!meta.IsStatusConditionTrue(v.Conditions, v1alpha1.VpcConditionReady)) {
				t.Errorf("octopus show vpcs in %s: %s has %d pods, external address %q and conditions %v; want %d pods, %s, Ready",
					c.Name, v.Name, v.Pods, v.ExternalIP, v.Conditions, len(c.Nodes), ext[v.Name])
			}
		}
		slices.Sort(listed)
		if want := slices.Sorted(slices.Values(lab.VpcNames)); !slices.Equal(listed, want) {
			t.Errorf("octopus show vpcs in %s lists %v, want %v", c.Name, listed, want)
		}
		t.Logf("octopus show vpcs in %s: %s", c.Name, out)
	}
}

// checkVpcGatewaysFollow checks, after a takeover in cluster c, that every lab VPC's gateway
// namespace is up in the new active gateway's node (its own directory, mounted) and that the
// other cluster's GatewayExIps still name the same external addresses: they are the VPCs',
// kept across failovers.
func checkVpcGatewaysFollow(ctx context.Context, t *testing.T, l *lab.Lab, c, other labnet.ClusterNet, node string, before map[string]netip.Addr) {
	hub := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	omc := kubeClient(t, l.Env.Cluster(other.Name).Kubeconfig)
	for _, vpc := range lab.VpcNames {
		waitVpcGatewayOn(ctx, t, l, c, node, vpc)
		waitGatewayExIP(ctx, t, omc, vpc, c.Name, before[vpc], globalCIDR(ctx, t, hub, c.Name), 30*time.Second)
	}
}

// vpcExternalIPs are the lab Vpcs' external addresses in cluster c.
func vpcExternalIPs(ctx context.Context, t *testing.T, l *lab.Lab, c labnet.ClusterNet) map[string]netip.Addr {
	t.Helper()
	mc := kubeClient(t, l.Env.Cluster(c.Name).Kubeconfig)
	ips := map[string]netip.Addr{}
	for _, vpc := range lab.VpcNames {
		ips[vpc] = vpcExternalIP(ctx, t, mc, c.Name, vpc)
	}
	return ips
}

// gone turns the error of a Get into nil when the object is gone, and an error while it is
// there or cannot be read.
func gone(err error) error {
	switch {
	case err == nil:
		return errors.New("still there")
	case apierrors.IsNotFound(err):
		return nil
	}
	return err
}

// checkVpcGatewayFenced checks the fence around a VPC gateway on cluster c's gateway node
// (podfence, at the node end of the gateway's way out): from red's gateway namespace, the
// node's kubelet port, a NodePort on the node's address, a ClusterIP and the echo pod on that
// node at its own address are all refused (the Service's one endpoint is that pod), while a
// cluster pod on the other node reaches all four (they serve) and the pod on the gateway node
// opens a connection to a listener in the gateway's namespace at its external address and gets
// its answer: the way between the node and the gateway carries traffic both ways, so what is
// refused is the fence's doing, which drops only what a VPC opens.
func checkVpcGatewayFenced(ctx context.Context, t *testing.T, l *lab.Lab, c labnet.ClusterNet, node labnet.NodeNet, pods []xpod) {
	cs := clientset(t, l.Env.Cluster(c.Name).Kubeconfig)
	target := podOn(t, pods, node.Name)
	var from xpod
	for _, p := range pods {
		if p.node != node.Name {
			from = p
		}
	}
	if from.name == "" {
		t.Fatalf("no pod of %s runs off its gateway node %s: %v", c.Name, node.Name, pods)
	}
	const label = "octopus-lab/fence-target"
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, label)
	pod, err := cs.CoreV1().Pods("default").Patch(ctx, target.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("labelling pod %s: %v", target.name, err)
	}
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "fence-target"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{label: "true"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service fence-target: %v", err)
	}
	defer func() {
		if err := cs.CoreV1().Services("default").Delete(context.Background(), svc.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting Service %s: %v", svc.Name, err)
		}
	}()
	nodeIP := node.LANAddr.Addr()
	services := map[string]netip.AddrPort{
		"the node's kubelet":   netip.AddrPortFrom(nodeIP, 10250),
		"a NodePort":           netip.AddrPortFrom(nodeIP, uint16(svc.Spec.Ports[0].NodePort)),
		"a ClusterIP":          netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80),
		"a pod of the cluster": netip.AddrPortFrom(netip.MustParseAddr(pod.Status.PodIP), 8080),
	}
	for what, addr := range services {
		waitFor(t, time.Minute, fmt.Sprintf("cluster pod %s to reach %s at %s", from.name, what, addr), func() error {
			conn, err := labnet.DialTCP(from.netns, addr, 3*time.Second)
			if err != nil {
				return err
			}
			return conn.Close()
		})
	}

	gw, ext := listenInVpcGateway(ctx, t, l, c, node, "red", 7777)
	waitFor(t, 30*time.Second, fmt.Sprintf("pod %s to reach red's gateway at %s", target.name, ext), func() error {
		_, err := askVpcGateway(target.netns, ext)
		return err
	})
	for what, addr := range services {
		if conn, err := labnet.DialTCP(gw, addr, 3*time.Second); err == nil {
			_ = conn.Close()
			t.Errorf("red's gateway on %s connected to %s at %s: the fence lets a VPC into its cluster", node.Name, what, addr)
		}
	}
}

// listenInVpcGateway names vpc's gateway namespace on node (the active gateway's) for the
// test, and serves in it, at the VPC's external address and port, a listener that answers
// each connection with the source address it sees. It returns the namespace's name and the
// address; both go when the test ends.
func listenInVpcGateway(ctx context.Context, t *testing.T, l *lab.Lab, c labnet.ClusterNet, node labnet.NodeNet, vpc string, port uint16) (string, netip.AddrPort) {
	t.Helper()
	gw := labnet.PodNetnsName(l.Network.ID, "vpcgw-"+vpc)
	if err := labnet.NameNamespace(gw, waitVpcGatewayOn(ctx, t, l, c, node.Name, vpc)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := labnet.DeleteNamespace(gw); err != nil {
			t.Errorf("removing the name %s: %v", gw, err)
		}
	})
	ext := netip.AddrPortFrom(vpcExternalIP(ctx, t, kubeClient(t, l.Env.Cluster(c.Name).Kubeconfig), c.Name, vpc), port)
	var ln net.Listener
	if err := tunneltest.InErr(gw, func() error {
		var err error
		ln, err = net.Listen("tcp4", ext.String())
		return err
	}); err != nil {
		t.Fatalf("listening in %s's gateway at %s: %v", vpc, ext, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if a, err := netip.ParseAddrPort(conn.RemoteAddr().String()); err == nil {
				_, _ = io.WriteString(conn, a.Addr().Unmap().String()+"\n")
			}
			_ = conn.Close()
		}
	}()
	return gw, ext
}

// askVpcGateway connects from netns to a listener of listenInVpcGateway and returns the source
// address it saw.
func askVpcGateway(netns string, addr netip.AddrPort) (netip.Addr, error) {
	conn, err := labnet.DialTCP(netns, addr, 3*time.Second)
	if err != nil {
		return netip.Addr{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return netip.Addr{}, fmt.Errorf("answer %q: %w", line, err)
	}
	return netip.ParseAddr(strings.TrimSpace(line))
}

// checkVpcEgressByGateway: what a VPC pod sends to a global address leaves by its VPC's
// gateway, SNATed to the VPC's external address. Each red pod of cluster c (one per node)
// connects to a listener in blue's gateway namespace at blue's external address, a global
// address of c's; the listener must see red's external address. Through eth0, the way a VPC
// pod reached global addresses before its net1 routed the hub's globalnet pool, it would see
// the pod's primary address.
func checkVpcEgressByGateway(ctx context.Context, t *testing.T, l *lab.Lab, c labnet.ClusterNet, node labnet.NodeNet, reds []xpod) {
	_, blue := listenInVpcGateway(ctx, t, l, c, node, "blue", 7778)
	red := vpcExternalIP(ctx, t, kubeClient(t, l.Env.Cluster(c.Name).Kubeconfig), c.Name, "red")
	for _, p := range reds {
		waitFor(t, 30*time.Second, fmt.Sprintf("red pod %s to reach blue's gateway at %s from red's external address %s", p.name, blue, red), func() error {
			saw, err := askVpcGateway(p.netns, blue)
			if err != nil {
				return err
			}
			if saw != red {
				return fmt.Errorf("blue's gateway saw the connection from %s, want red's external address %s", saw, red)
			}
			return nil
		})
	}
}
