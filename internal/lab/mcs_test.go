package lab_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/lab"
)

// mcsCluster is one member of the lab as a user of the MCS API sees it: kubectl, a clientset
// and a toolbox pod to run clients from.
type mcsCluster struct {
	name    string
	kubectl labCluster
	cs      kubernetes.Interface
	ctrl    client.Client
	// toolboxIP is the toolbox pod's address: the client address servers must see.
	toolboxIP string
}

// echoService is an echo server (octopus-echo, HTTP on 8080) behind a Service, with one pod
// per cluster it runs in.
type echoService struct {
	name string
	// ports maps each cluster to the ports its Service exposes (name → port, all targeting
	// 8080); a cluster without an entry has no such Service.
	ports map[string]map[string]int32
	// exportedFrom are the clusters that export it.
	exportedFrom []string
}

// testMCSFidelity checks, with the clients a user runs in a toolbox pod (nc, curl), that the
// ClusterSet IP behind <svc>.<ns>.svc.clusterset.local works from every cluster as KEP-1645
// describes, the exporter included, and that the server sees the client pod's own address
// (direct addressing, no NAT): a service exported from one cluster; a service that exists in
// both clusters but is exported from one (only the exporter's pods answer, in both); a
// service exported from both with different ports (each port is answered only by the cluster
// that exposes it).
func testMCSFidelity(ctx context.Context, t *testing.T, l *lab.Lab, binDir string) {
	c1, c2 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name
	clusters := map[string]*mcsCluster{}
	for _, name := range []string{c1, c2} {
		kubeconfig := l.Env.Cluster(name).Kubeconfig
		c := &mcsCluster{name: name, cs: clientset(t, kubeconfig), ctrl: kubeClient(t, kubeconfig),
			kubectl: labCluster{kubeconfig: kubeconfig, kubectl: filepath.Join(binDir, "kubectl")}}
		create(ctx, t, c.cs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "mcs-toolbox"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "toolbox", Image: "nicolaka/netshoot"}}},
		})
		clusters[name] = c
	}
	services := []echoService{
		{name: "solo", ports: map[string]map[string]int32{c1: {"http": 80}}, exportedFrom: []string{c1}},
		{name: "both", ports: map[string]map[string]int32{c1: {"http": 80}, c2: {"http": 80}}, exportedFrom: []string{c1}},
		{name: "split", ports: map[string]map[string]int32{c1: {"one": 81}, c2: {"two": 82}}, exportedFrom: []string{c1, c2}},
	}
	for _, s := range services {
		for cluster, ports := range s.ports {
			c := clusters[cluster]
			create(ctx, t, c.cs, mcsEchoPod(s.name, cluster))
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default"},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "mcs-" + s.name}}}
			for name, port := range ports {
				svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromInt32(8080)})
			}
			if _, err := c.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating Service %s in %s: %v", s.name, cluster, err)
			}
		}
		for _, cluster := range s.exportedFrom {
			if err := clusters[cluster].ctrl.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default"}}); err != nil {
				t.Fatalf("exporting %s from %s: %v", s.name, cluster, err)
			}
		}
	}
	pods := map[string]*corev1.Pod{} // "<svc>/<cluster>" → its echo pod
	for _, c := range clusters {
		c.toolboxIP = waitPodReady(ctx, t, c.cs, "mcs-toolbox").Status.PodIP
		for _, s := range services {
			if _, ok := s.ports[c.name]; ok {
				pods[s.name+"/"+c.name] = waitPodReady(ctx, t, c.cs, mcsEchoPod(s.name, c.name).Name)
			}
		}
	}

	// What each client must see: for every service port, the pods of the clusters that export
	// that port, and never another's.
	type want struct {
		svc     string
		port    int32
		answers []string // clusters whose pod may answer; each must, at least once
	}
	wants := []want{
		{"solo", 80, []string{c1}},
		{"both", 80, []string{c1}},
		{"split", 81, []string{c1}},
		{"split", 82, []string{c2}},
	}
	for _, from := range []string{c1, c2} {
		client := clusters[from]
		for _, w := range wants {
			host := w.svc + ".default.svc.clusterset.local"
			seen := map[string]bool{}
			// Enough requests that a wrong backend among the ClusterSet IP's endpoints would
			// show: kube-proxy picks one at random per connection.
			for i := range 8 {
				tool := "curl"
				if i%2 == 1 {
					tool = "nc"
				}
				reply := client.request(ctx, t, tool, host, w.port)
				answered := ""
				for _, c := range w.answers {
					p := pods[w.svc+"/"+c]
					if strings.Contains(reply, fmt.Sprintf("cluster=%s ", c)) && strings.Contains(reply, " pod="+p.Name+" ") &&
						strings.Contains(reply, " ip="+p.Status.PodIP+" ") {
						answered = c
					}
				}
				if answered == "" {
					t.Fatalf("%s in %s -> %s:%d: %q, want an answer from the pod of %v", tool, from, host, w.port, reply, w.answers)
				}
				if !strings.Contains(reply, " client="+client.toolboxIP+":") {
					t.Fatalf("%s in %s -> %s:%d: the server saw %q, want the toolbox pod's own address %s", tool, from, host, w.port, reply, client.toolboxIP)
				}
				seen[answered] = true
			}
			for _, c := range w.answers {
				if !seen[c] {
					t.Errorf("%s -> %s:%d: no answer from %s in 8 requests", from, host, w.port, c)
				}
			}
			t.Logf("%s -> %s:%d (curl and nc): answered by %v, client address %s", from, host, w.port, w.answers, client.toolboxIP)
		}
		client.checkSRV(ctx, t, "split.default.svc.clusterset.local", 81, 82)
	}
}

// checkSRV asks the cluster's DNS (CoreDNS, which forwards clusterset.local to octopus-dns)
// from the toolbox, with dig and with BIND's nslookup, for the SRV records of the bare service
// name, as users of the cluster's own DNS ask for <svc>.<ns>.svc.cluster.local: one record
// per port, each pointing at the service name.
func (c *mcsCluster) checkSRV(ctx context.Context, t *testing.T, host string, ports ...int32) {
	t.Helper()
	var want []string
	for _, p := range ports {
		want = append(want, fmt.Sprintf(" %d %s.", p, host))
	}
	for _, argv := range [][]string{
		{"dig", "+short", "+time=2", "+tries=1", "SRV", host},
		{"nslookup", "-type=SRV", host},
	} {
		var last kubectlResult
		err := wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			last = c.kubectl.run(ctx, t, nil, "", append([]string{"exec", "mcs-toolbox", "--"}, argv...)...)
			for _, w := range want {
				if !strings.Contains(last.stdout, w) {
					return false, nil
				}
			}
			return last.code == 0 && strings.Count(last.stdout, host+".") >= len(want), nil
		})
		if err != nil {
			t.Fatalf("%s in %s: exit %d, %q, %q; want one SRV per port %v", strings.Join(argv, " "), c.name, last.code, last.stdout, last.stderr, ports)
		}
	}
	t.Logf("SRV %s from %s (dig and nslookup): ports %v", host, c.name, ports)
}

// mcsEchoPod is the echo pod of service svc in cluster.
func mcsEchoPod(svc, cluster string) *corev1.Pod {
	c := echoContainer(cluster)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mcs-" + svc + "-" + cluster, Labels: map[string]string{"app": "mcs-" + svc}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}
}

// request asks host:port for "/" from the toolbox pod with tool (curl, or nc speaking HTTP by
// hand) and returns the echo server's answer line. It retries briefly: right after the
// exports, DNS and the imported endpoints may still be on their way.
func (c *mcsCluster) request(ctx context.Context, t *testing.T, tool, host string, port int32) string {
	t.Helper()
	var last kubectlResult
	target := net.JoinHostPort(host, fmt.Sprint(port))
	err := wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		switch tool {
		case "curl":
			last = c.kubectl.run(ctx, t, nil, "", "exec", "mcs-toolbox", "--", "curl", "-sS", "--max-time", "3", "http://"+target+"/")
		case "nc":
			last = c.kubectl.run(ctx, t, nil, "GET / HTTP/1.0\r\nHost: "+target+"\r\n\r\n",
				"exec", "-i", "mcs-toolbox", "--", "nc", "-v", "-w", "3", host, fmt.Sprint(port))
			// nc -v reports the connection on stderr: "Connection to <host> <port> port [tcp/*] succeeded!"
			if last.code == 0 && !strings.Contains(last.stderr, "succeeded") {
				last.code = -1
			}
		}
		return last.code == 0 && strings.Contains(last.stdout, "cluster="), nil
	})
	if err != nil {
		t.Fatalf("%s in %s's toolbox -> %s: exit %d, stdout %q, stderr %q", tool, c.name, target, last.code, last.stdout, last.stderr)
	}
	for _, line := range strings.Split(last.stdout, "\n") {
		if strings.HasPrefix(line, "cluster=") {
			return strings.TrimSpace(line)
		}
	}
	return last.stdout
}
