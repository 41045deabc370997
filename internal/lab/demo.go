package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// DemoNamespace holds what Demo deploys in both clusters.
const DemoNamespace = "demo"

// DemoReport is what the demo shows works across clusters today.
type DemoReport struct {
	// EchoReply is the echo server's answer to an HTTP request made from a node of the
	// exporting cluster to the echo Service's ClusterIP, through the real kube-proxy.
	EchoReply string
	// EchoClusterIP is the echo Service's ClusterIP in the exporting cluster.
	EchoClusterIP string
	// ImportIPs are the ClusterSet IPs the importing cluster gave the echo service.
	ImportIPs []string
	// ImportedEndpoints are the addresses in the importing cluster's imported EndpointSlices.
	ImportedEndpoints []string
	// Toolbox is the toolbox pod of the importing cluster, "<namespace>/<name> on <node>".
	Toolbox string
	// DNSName is the echo service's name in the clusterset.local zone.
	DNSName string
	// DNSAnswer is what the toolbox pod's resolver (the cluster's CoreDNS, forwarding to
	// octopus-dns) answered for DNSName: the ClusterSet IP.
	DNSAnswer string
	// CrossClusterReply is the echo server's answer to an HTTP request the toolbox pod made
	// by DNSName: kube-proxy in the importing cluster, the gateways' tunnel, kube-proxy in the
	// exporting cluster.
	CrossClusterReply string
}

// Demo deploys an echo server in the first member cluster, exports it, starts a toolbox pod in
// the second, waits until the second cluster has imported the service, and then, from the
// toolbox pod (through the API server's exec, as `kubectl exec` does), resolves the service's
// clusterset.local name and requests it across the clusters. It is idempotent.
func (l *Lab) Demo(ctx context.Context) (*DemoReport, error) {
	if len(l.Members) < 2 {
		return nil, fmt.Errorf("the demo needs two member clusters, the lab has %d", len(l.Members))
	}
	exporter, importer := l.Members[0], l.Members[1]
	ec, ic, err := l.deployDemo(ctx, exporter, importer)
	if err != nil {
		return nil, err
	}
	report := &DemoReport{}
	if err := waitForDemo(ctx, ec, ic, exporter, importer, report); err != nil {
		return report, err
	}
	return report, l.probeDemo(ctx, ec, exporter, importer, report)
}

// deployDemo applies the echo server (and its export) in exporter and the toolbox pod in
// importer, and returns clients of both clusters.
func (l *Lab) deployDemo(ctx context.Context, exporter, importer string) (ec, ic client.Client, err error) {
	ec, err = client.New(l.Env.Cluster(exporter).RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, nil, err
	}
	ic, err = client.New(l.Env.Cluster(importer).RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace}}
	if err := kube.Apply(ctx, ec, append([]client.Object{ns}, echoObjects(exporter)...)...); err != nil {
		return nil, nil, fmt.Errorf("deploying the echo server in %s: %w", exporter, err)
	}
	if err := kube.Apply(ctx, ic, ns, toolboxPod()); err != nil {
		return nil, nil, fmt.Errorf("starting the toolbox in %s: %w", importer, err)
	}
	return ec, ic, nil
}

// waitForDemo waits, through the API servers, until the echo server and the toolbox are ready
// and importer has imported the echo service, filling in what the report says of them.
func waitForDemo(ctx context.Context, ec, ic client.Client, exporter, importer string, report *DemoReport) error {
	steps := []struct {
		what string
		done func(context.Context) (bool, error)
	}{
		{"the echo server to be ready in " + exporter, func(ctx context.Context) (bool, error) {
			d := &appsv1.Deployment{}
			if err := ec.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: "echo"}, d); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return d.Status.ReadyReplicas == ptr.Deref(d.Spec.Replicas, 1), nil
		}},
		{"the toolbox to be ready in " + importer, func(ctx context.Context) (bool, error) {
			pod := &corev1.Pod{}
			if err := ic.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: "toolbox"}, pod); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			report.Toolbox = fmt.Sprintf("%s/%s on %s (%s)", pod.Namespace, pod.Name, pod.Spec.NodeName, pod.Status.PodIP)
			return isReady(pod), nil
		}},
		{importer + " to import the echo service", func(ctx context.Context) (bool, error) {
			si := &mcsv1beta1.ServiceImport{}
			if err := ic.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: "echo"}, si); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			slices := &discoveryv1.EndpointSliceList{}
			if err := ic.List(ctx, slices, client.InNamespace(DemoNamespace), client.MatchingLabels{mcsv1beta1.LabelServiceName: "echo"}); err != nil {
				return false, err
			}
			report.ImportIPs, report.ImportedEndpoints = si.Spec.IPs, nil
			for _, s := range slices.Items {
				for _, e := range s.Endpoints {
					report.ImportedEndpoints = append(report.ImportedEndpoints, e.Addresses...)
				}
			}
			return len(si.Spec.IPs) > 0 && len(report.ImportedEndpoints) > 0, nil
		}},
	}
	for _, s := range steps {
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, s.done); err != nil {
			return fmt.Errorf("waiting for %s: %w (`octopus lab status` and the logs under the lab dir show why)", s.what, err)
		}
	}
	return nil
}

// probeDemo checks the data path, each check retried until it converges: the echo Service
// inside exporter, its clusterset.local name from the toolbox in importer, and a request by
// that name across the clusters.
func (l *Lab) probeDemo(ctx context.Context, ec client.Client, exporter, importer string, report *DemoReport) error {
	svc := &corev1.Service{}
	if err := ec.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: "echo"}, svc); err != nil {
		return err
	}
	report.EchoClusterIP = svc.Spec.ClusterIP
	report.DNSName = "echo." + DemoNamespace + ".svc.clusterset.local"
	err := retryDemo(ctx, "the echo Service to answer inside "+exporter, func() (bool, error) {
		var err error
		report.EchoReply, err = l.httpGetFromNode(exporter, svc.Spec.ClusterIP, 80)
		return err == nil, err
	})
	if err != nil {
		return err
	}
	err = retryDemo(ctx, report.DNSName+" to resolve in "+importer, func() (bool, error) {
		out, err := l.execInPod(ctx, importer, DemoNamespace, "toolbox", "dig", "+short", "+time=2", "+tries=1", report.DNSName)
		report.DNSAnswer = strings.TrimSpace(out)
		return err == nil && slices.Contains(report.ImportIPs, report.DNSAnswer), err
	})
	if err != nil {
		return err
	}
	return retryDemo(ctx, "a reply from "+report.DNSName+" across the clusters", func() (bool, error) {
		out, err := l.execInPod(ctx, importer, DemoNamespace, "toolbox", "busybox", "wget", "-qO-", "http://"+report.DNSName+"/")
		report.CrossClusterReply = strings.TrimSpace(out)
		return err == nil && report.CrossClusterReply != "", err
	})
}

// retryDemo calls f every second until it reports done, for up to three minutes; on timeout
// the error names what it waited for and f's last error. Each of the demo's probes converges
// by itself within seconds to a minute: kube-proxy programs new endpoints, CoreDNS's reload
// plugin re-reads the Corefile join patched (every 30 s), octopus-dns and the tunnels come up.
func retryDemo(ctx context.Context, what string, f func() (bool, error)) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		done, err := f()
		lastErr = err
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w (last: %w)", what, err, lastErr)
	}
	return nil
}

// execInPod runs argv in the pod's first container through the API server's exec
// subresource (WebSocket, as kubectl does) and returns its standard output.
func (l *Lab) execInPod(ctx context.Context, cluster, namespace, pod string, argv ...string) (string, error) {
	cfg := l.Env.Cluster(cluster).RESTConfig()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("%s in %s/%s: %w (stderr: %s)", strings.Join(argv, " "), namespace, pod, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// httpGetFromNode asks ip:port for "/" from the namespace of the cluster's last node (a
// worker), so the request goes through that node's kube-proxy.
func (l *Lab) httpGetFromNode(cluster, ip string, port uint16) (string, error) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return "", fmt.Errorf("service IP %q: %w", ip, err)
	}
	var netns string
	for _, c := range l.Network.Clusters {
		if c.Name == cluster && len(c.Nodes) > 0 {
			netns = c.Nodes[len(c.Nodes)-1].Netns
		}
	}
	conn, err := labnet.DialTCP(netns, netip.AddrPortFrom(addr, port), 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("connecting to %s:%d from %s: %w", ip, port, netns, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: echo\r\n\r\n"); err != nil {
		return "", fmt.Errorf("sending the request: %w", err)
	}
	body, err := io.ReadAll(bufio.NewReader(conn))
	if err != nil {
		return "", fmt.Errorf("reading the reply: %w", err)
	}
	_, reply, _ := strings.Cut(string(body), "\r\n\r\n")
	return strings.TrimSpace(reply), nil
}

// echoObjects are the demo's echo server in cluster (echoContainer), its Service and export.
func echoObjects(cluster string) []client.Object {
	labels := map[string]string{"app": "echo"}
	return []client.Object{
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: DemoNamespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{echoContainer(cluster)}},
				},
			},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: DemoNamespace},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "tcp", Port: 9000, TargetPort: intstr.FromInt32(9000)},
			}},
		},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: DemoNamespace}},
	}
}

// echoContainer is the echo server of cluster (HTTP on 8080, TCP echo on 9000), which answers
// with its cluster, node, pod and namespace. The cluster's name is set here rather than left
// to the lab's NRI plugin (realnode.EnvCluster), which containerd may have dropped under load.
func echoContainer(cluster string) corev1.Container {
	return corev1.Container{
		Name: "echo", Image: images.EchoImage,
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "tcp", ContainerPort: 9000}},
		Env: []corev1.EnvVar{
			{Name: "CLUSTER_NAME", Value: cluster},
			fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_IP", "status.podIP"),
		},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)},
		}},
	}
}

// fieldEnv is an environment variable from the downward API, as the echo server expects.
func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func toolboxPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "toolbox", Namespace: DemoNamespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "toolbox", Image: "nicolaka/netshoot"}}},
	}
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
