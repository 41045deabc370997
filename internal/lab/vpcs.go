package lab

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// The VPCs of Options.Vpcs, issue 33's scenario: in every member cluster on the secondary
// network, VPCs red and blue whose subnets are identical (VpcSubnets, the same in every
// cluster), the namespace of each VPC's name bound to it, and in each of those namespaces an
// echo pod on every node (VpcEchoPod) asking for the same address in both VPCs and every
// cluster (VpcEchoAddr). Identical addresses are the point: an answer from the address of a
// red pod that names a blue pod is a VPC leak, and nothing else tells the two apart.

// VpcNames are the lab's VPCs, each also the name of the namespace bound to it.
var VpcNames = []string{"red", "blue"}

// vpcSubnets are every lab VPC's subnets: clear of the lab's pod, service and LAN ranges and
// of the secondary pool (10.112.0.0/12), so that a pod's eth0 routes never meet them.
var vpcSubnets = []v1alpha1.VpcSubnet{{Name: "a", CIDR: "10.200.1.0/24"}, {Name: "b", CIDR: "10.200.2.0/24"}}

// VpcSubnets are the subnets of every lab VPC, in every cluster; the echo pods are on the first.
func VpcSubnets() []v1alpha1.VpcSubnet { return append([]v1alpha1.VpcSubnet(nil), vpcSubnets...) }

// VpcEchoPod is the name of vpc's echo pod on node, in the namespace named vpc. The VPC is in
// the name because the echo server answers with its pod's name: that is how a client tells a
// red pod's answer from a blue pod's at one address.
func VpcEchoPod(vpc, node string) string { return vpc + "-" + node }

// VpcEchoAddr is the net1 address the echo pods on the k-th node (0-based) of a cluster ask
// for (podnet.RequestedIPAnnotation), in every VPC: the 10+k-th host of the first subnet.
func VpcEchoAddr(k int) netip.Addr {
	a := netip.MustParsePrefix(vpcSubnets[0].CIDR).Addr().As4()
	a[3] += byte(10 + k)
	return netip.AddrFrom4(a)
}

// vpcReadyTimeout bounds each wait of startVpcs: the ovnmaster applies a VPC in well under a
// second, the pods wait for their node's image and the NRI plugin, as the chart's did.
const vpcReadyTimeout = 3 * time.Minute

// startVpcs makes the lab's VPCs in cluster cp (network c) and waits until they are Ready and
// their echo pods run on them. The pods come after the Vpcs are Ready: the ovnmaster places a
// pod where its namespace is bound when the pod gets its address, and a pod addressed before
// the binding was read would stay on the cluster's network for its lifetime.
func startVpcs(ctx context.Context, p *progress.Reporter, cp *controlplane.ControlPlane, c labnet.ClusterNet) error {
	start := time.Now()
	p.Step("%s: Vpcs %s with subnets %s, a namespace bound to each, an echo pod per VPC on each of its %d nodes",
		cp.Name, strings.Join(VpcNames, " and "), subnetCIDRs(), len(c.Nodes))
	cl, err := client.New(cp.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return fmt.Errorf("the VPCs of %s: %w", cp.Name, err)
	}
	var objs []client.Object
	for _, vpc := range VpcNames {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: vpc}},
			&v1alpha1.Vpc{ObjectMeta: metav1.ObjectMeta{Name: vpc}, Spec: v1alpha1.VpcSpec{Subnets: VpcSubnets(), Namespaces: []string{vpc}}})
	}
	if err := kube.Apply(ctx, cl, objs...); err != nil {
		return fmt.Errorf("the VPCs of %s: %w", cp.Name, err)
	}
	for _, vpc := range VpcNames {
		if err := waitVpc(ctx, cp.Name, "Vpc "+vpc+" to be Ready", func(ctx context.Context) (string, error) {
			v := &v1alpha1.Vpc{}
			if err := cl.Get(ctx, client.ObjectKey{Name: vpc}, v); err != nil {
				return "", err
			}
			if !meta.IsStatusConditionTrue(v.Status.Conditions, v1alpha1.VpcConditionReady) {
				return fmt.Sprintf("conditions %v", v.Status.Conditions), nil
			}
			return "", nil
		}); err != nil {
			return err
		}
	}
	objs = objs[:0]
	for _, vpc := range VpcNames {
		for k, n := range c.Nodes {
			objs = append(objs, NewVpcEchoPod(cp.Name, vpc, VpcEchoPod(vpc, n.Name), n.Name, VpcEchoAddr(k)))
		}
	}
	if err := kube.Apply(ctx, cl, objs...); err != nil {
		return fmt.Errorf("the VPCs' echo pods in %s: %w", cp.Name, err)
	}
	for _, o := range objs {
		pod, vpc := o.GetName(), o.GetNamespace()
		if err := waitVpc(ctx, cp.Name, "pod "+vpc+"/"+pod+" to run on Vpc "+vpc, func(ctx context.Context) (string, error) {
			got := &corev1.Pod{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
				return "", err
			}
			return vpcPodProblem(got, vpc), nil
		}); err != nil {
			return err
		}
	}
	p.Done(start, "%s: Vpcs %s Ready, %d echo pods on them", cp.Name, strings.Join(VpcNames, " and "), len(objs))
	return nil
}

// NewVpcEchoPod is echo pod name of cluster in vpc's namespace on node, asking for addr on
// net1 (the lab's are named VpcEchoPod; a test may add others).
func NewVpcEchoPod(cluster, vpc, name, node string, addr netip.Addr) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: vpc,
			Labels:      map[string]string{"app": "echo"},
			Annotations: map[string]string{podnet.RequestedIPAnnotation: addr.String()},
		},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers:   []corev1.Container{echoContainer(cluster)},
		},
	}
}

// vpcPodProblem says why pod is not yet a running echo pod on vpc, or "" when it is: Ready
// (the NRI plugin starts no sandbox without its net1) with the ovnmaster's attachment to vpc.
func vpcPodProblem(pod *corev1.Pod, vpc string) string {
	if why := pod.Annotations[podnet.ErrorAnnotation]; why != "" {
		return "no net1: " + why
	}
	a, ok, err := podnet.FindVpc(pod.Annotations)
	switch {
	case err != nil:
		return err.Error()
	case !ok:
		return "not attached to a VPC (yet)"
	case a.Vpc != vpc:
		return "attached to Vpc " + a.Vpc
	case !isReady(pod):
		return fmt.Sprintf("not ready: %s", pod.Status.Phase)
	}
	return ""
}

// waitVpc polls check until it reports nothing wrong, failing after vpcReadyTimeout with the
// last thing it reported.
func waitVpc(ctx context.Context, cluster, what string, check func(context.Context) (string, error)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, vpcReadyTimeout, true, func(ctx context.Context) (bool, error) {
		problem, err := check(ctx)
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // retried; reported on timeout
		}
		last = problem
		return problem == "", nil
	})
	if err != nil {
		return fmt.Errorf("%s: waiting for %s: %w (last: %s; `octopus show vpcs` and the ovnmaster's log say why)",
			cluster, what, err, last)
	}
	return nil
}

// subnetCIDRs lists the lab VPCs' subnet CIDRs, for people.
func subnetCIDRs() string {
	cidrs := make([]string, len(vpcSubnets))
	for i, s := range vpcSubnets {
		cidrs[i] = s.CIDR
	}
	return strings.Join(cidrs, ", ")
}
