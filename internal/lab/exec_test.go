package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
)

// labCluster is a running lab's first member cluster, as the tests of kubectl against it see
// it.
type labCluster struct {
	// net is the cluster testExecAndLogs runs on (its first two nodes).
	net labnet.ClusterNet
	// nobody is a client certificate and key of the cluster's CA for a user without rights
	// (testKubeletAuthz).
	nobody     clientCert
	dir        string
	kubeconfig string
	kubectl    string
	cs         kubernetes.Interface
}

// kubectlResult is one kubectl run.
type kubectlResult struct {
	stdout, stderr string
	code           int
}

// run runs kubectl with args against the cluster; env adds variables, stdin is piped if set.
func (c labCluster) run(ctx context.Context, t *testing.T, env []string, stdin string, args ...string) kubectlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig=" + c.kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := kubectlResult{stdout: out.String(), stderr: errb.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// testExecAndLogs drives lab pods through the real kubectl, which reaches the node agent's
// kubelet API through the API server: exec over WebSocket and over SPDY (pod -> pod on the
// same and the other node, pod -> Service, stdin, stderr, exit codes; no wget -T: Debian's
// busybox 1.35 wget crashes with it), exec with a terminal,
// and logs (all, tail, timestamps, follow, previous). It also checks that the kubelet API
// serves the API server's client certificate only. checkPods runs it on its lab, with its
// echo pods (echo, by node name) and their Service.
func testExecAndLogs(ctx context.Context, t *testing.T, c labCluster, echo map[string]*corev1.Pod, svc *corev1.Service) {
	node1, node2 := c.net.Nodes[0], c.net.Nodes[1]
	if _, err := c.cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hello"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(ctx, t, c.cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "toolbox"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node1.Name},
			Containers: []corev1.Container{{Name: "sh", Image: "busybox:1.37",
				Command: []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; echo tock $i >&2; sleep 0.5; done"},
				// Neither path exists on this machine: the pod's mount namespace makes them.
				VolumeMounts: []corev1.VolumeMount{
					{Name: "settings", MountPath: "/etc/octopus-lab-test/settings", ReadOnly: true},
					{Name: "scratch", MountPath: "/var/lib/octopus-lab-test/scratch"},
				}}},
			Volumes: []corev1.Volume{
				{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	})
	create(ctx, t, c.cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crasher"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox",
			// Each run says a word of its own (busybox's date has no %N, and two runs may
			// start within a second), and lives long enough to be read while it runs.
			Command: []string{"sh", "-c", "echo run $(cat /proc/sys/kernel/random/uuid); sleep 4; exit 3"}}}},
	})
	waitPodReady(ctx, t, c.cs, "toolbox")

	for _, mode := range []struct{ name, env string }{
		{"websocket", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"},
		{"spdy", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			env := []string{mode.env}
			for _, tc := range []struct{ what, url, want string }{
				{"pod -> pod on the same node", "http://" + echo[node1.Name].Status.PodIP + ":8080/", "pod=echo-" + node1.Name + " "},
				{"pod -> pod on another node", "http://" + echo[node2.Name].Status.PodIP + ":8080/", "pod=echo-" + node2.Name + " "},
				{"pod -> Service ClusterIP", "http://" + svc.Spec.ClusterIP + "/", "pod=echo-"},
			} {
				var last kubectlResult
				err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
					last = c.run(ctx, t, env, "", "exec", "toolbox", "--", "wget", "-qO-", tc.url)
					return last.code == 0 && strings.Contains(last.stdout, tc.want), nil
				})
				if err != nil {
					t.Errorf("%s: kubectl exec wget %s: exit %d, stdout %q, stderr %q; want %q", tc.what, tc.url, last.code, last.stdout, last.stderr, tc.want)
				} else {
					t.Logf("%s: %s", tc.what, strings.TrimSpace(last.stdout))
				}
			}
			for _, tc := range []struct {
				what           string
				stdin          string
				args           []string
				code           int
				stdout, stderr string
			}{
				{"exit code", "", []string{"exec", "toolbox", "--", "sh", "-c", "echo out; exit 7"}, 7, "out\n", ""},
				{"exit code of a signal", "", []string{"exec", "toolbox", "--", "sh", "-c", "kill -TERM $$"}, 128 + 15, "", ""},
				{"stderr", "", []string{"exec", "toolbox", "--", "sh", "-c", "echo oops >&2"}, 0, "", "oops\n"},
				{"stdin piped", "line one\nline two\n", []string{"exec", "-i", "toolbox", "--", "sh", "-c", "wc -l; echo done"}, 0, "2\ndone\n", ""},
				{"pod environment", "", []string{"exec", "toolbox", "--", "sh", "-c", "echo $HOSTNAME"}, 0, "toolbox\n", ""},
			} {
				got := c.run(ctx, t, env, tc.stdin, tc.args...)
				if got.code != tc.code || strings.TrimLeft(got.stdout, " ") != tc.stdout || (tc.stderr != "" && !strings.Contains(got.stderr, tc.stderr)) {
					t.Errorf("%s: kubectl %s: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
						tc.what, strings.Join(tc.args, " "), got.code, got.stdout, got.stderr, tc.code, tc.stdout, tc.stderr)
				}
			}
		})
	}

	t.Run("tty", func(t *testing.T) { testExecTTY(ctx, t, c, "toolbox") })

	t.Run("resolv.conf and hosts", func(t *testing.T) {
		hostResolv, hostHosts := readFile("/etc/resolv.conf"), readFile("/etc/hosts")
		for _, tc := range []struct{ file, want string }{
			{"/etc/resolv.conf", fmt.Sprintf("search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver %s\noptions ndots:5\n", clusterDNS(t, c.net.ServiceCIDR))},
		} {
			got := c.run(ctx, t, nil, "", "exec", "toolbox", "--", "cat", tc.file)
			if got.code != 0 || got.stdout != tc.want {
				t.Errorf("%s in the pod: exit %d, %q, stderr %q; want %q", tc.file, got.code, got.stdout, got.stderr, tc.want)
			}
		}
		toolbox, err := c.cs.CoreV1().Pods("default").Get(ctx, "toolbox", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hosts := c.run(ctx, t, nil, "", "exec", "toolbox", "--", "cat", "/etc/hosts")
		if want := toolbox.Status.PodIP + "\ttoolbox\n"; !strings.Contains(hosts.stdout, want) || !strings.Contains(hosts.stdout, "127.0.0.1\tlocalhost\n") {
			t.Errorf("/etc/hosts in the pod: %q; want localhost and %q", hosts.stdout, want)
		}
		// The pod's files are its own: the machine's are untouched.
		if readFile("/etc/resolv.conf") != hostResolv || readFile("/etc/hosts") != hostHosts {
			t.Error("the machine's /etc/resolv.conf or /etc/hosts changed")
		}
	})

	t.Run("volumes", func(t *testing.T) { testVolumes(ctx, t, c) })

	t.Run("volume source created late", func(t *testing.T) { testLateConfigMap(ctx, t, c) })

	t.Run("cluster DNS", func(t *testing.T) { testClusterDNS(ctx, t, c, "toolbox") })

	t.Run("logs", func(t *testing.T) {
		all := c.run(ctx, t, nil, "", "logs", "toolbox")
		if problem := tickTockProblem(all.stdout); all.code != 0 || problem != "" {
			// The kubelet's log of the container: /var/log/pods of its node.
			raw, _ := filepath.Glob(filepath.Join(c.dir, realnode.NodesDir, "*", "logs", "pods", "default_toolbox_*", "sh", "0.log"))
			head := ""
			if len(raw) == 1 {
				head = readFile(raw[0])
				head = head[:min(len(head), 600)]
			}
			t.Errorf("kubectl logs: exit %d, %s; stdout %.300q, stderr %q; the log file starts %q", all.code, problem, all.stdout, all.stderr, head)
		}
		tail := c.run(ctx, t, nil, "", "logs", "--tail=2", "--timestamps", "toolbox")
		lines := strings.Split(strings.TrimSuffix(tail.stdout, "\n"), "\n")
		stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z t[io]ck \d+$`)
		if tail.code != 0 || len(lines) != 2 || !stamp.MatchString(lines[0]) || !stamp.MatchString(lines[1]) {
			t.Errorf("kubectl logs --tail=2 --timestamps: exit %d, stdout %q; want two time-stamped lines", tail.code, tail.stdout)
		}
		testLogsFollow(ctx, t, c)
		// A crash-looping container's run before the current one.
		// Read while a run after the second restart is running: between runs (back-off) the
		// current container is the last one to have exited, which is also --previous's.
		waitPod(ctx, t, c.cs, "crasher", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 2 &&
				p.Status.ContainerStatuses[0].State.Running != nil
		})
		prev := c.run(ctx, t, nil, "", "logs", "--previous", "crasher")
		cur := c.run(ctx, t, nil, "", "logs", "crasher")
		if prev.code != 0 || !strings.HasPrefix(prev.stdout, "run ") || prev.stdout == cur.stdout {
			t.Errorf("kubectl logs --previous: exit %d, stdout %q, stderr %q (current run: %q); want another run's line",
				prev.code, prev.stdout, prev.stderr, cur.stdout)
		}
	})

	t.Run("authorization", func(t *testing.T) { testKubeletAuthz(ctx, t, c, node1.LANAddr.Addr()) })

	t.Run("deletion removes the pod's files", func(t *testing.T) {
		crasher, err := c.cs.CoreV1().Pods("default").Get(ctx, "crasher", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The pod's directory in its node's kubelet directory (the node's /var/lib/kubelet).
		dirs, _ := filepath.Glob(filepath.Join(c.dir, "nodes", "*", "kubelet", "pods", string(crasher.UID)))
		if len(dirs) != 1 {
			t.Fatalf("crasher pod directories: %v, want one", dirs)
		}
		if err := c.cs.CoreV1().Pods("default").Delete(ctx, "crasher", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, err := os.Stat(dirs[0])
			return os.IsNotExist(err), nil
		})
		if err != nil {
			t.Errorf("%s still exists after the pod was deleted", dirs[0])
		}
	})
}

// testVolumes checks the toolbox pod's volumes from inside it: the service account token
// volume every pod gets, a configMap volume that follows changes of its ConfigMap and is
// read-only, and an emptyDir; and that the machine has none of their mount points.
func testVolumes(ctx context.Context, t *testing.T, c labCluster) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace"}, 0, "default"},
		{[]string{"sh", "-c", "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && grep -c CERTIFICATE /var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}, 0, "2\n"},
		{[]string{"cat", "/etc/octopus-lab-test/settings/greeting"}, 0, "hello"},
		{[]string{"sh", "-c", "echo x > /etc/octopus-lab-test/settings/new"}, 1, ""},
		{[]string{"sh", "-c", "echo kept > /var/lib/octopus-lab-test/scratch/f && cat /var/lib/octopus-lab-test/scratch/f"}, 0, "kept\n"},
	} {
		got := c.run(ctx, t, nil, "", append([]string{"exec", "toolbox", "--"}, tc.args...)...)
		if got.code != tc.code || (tc.code == 0 && got.stdout != tc.want) {
			t.Errorf("in the pod: %q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q", tc.args, got.code, got.stdout, got.stderr, tc.code, tc.want)
		}
	}
	for _, p := range []string{"/etc/octopus-lab-test", "/var/lib/octopus-lab-test", "/run/secrets"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists on the machine: a pod's mount point leaked out of its namespace", p)
		}
	}
	cm, err := c.cs.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["greeting"] = "changed"
	if _, err := c.cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last kubectlResult
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = c.run(ctx, t, nil, "", "exec", "toolbox", "--", "cat", "/etc/octopus-lab-test/settings/greeting")
		return last.stdout == "changed", nil
	})
	if err != nil {
		t.Errorf("configMap volume after the ConfigMap changed: %q, %q; want %q", last.stdout, last.stderr, "changed")
	}
}

// tickTockProblem checks the toolbox's output: stdout's ticks and stderr's tocks, each
// numbered from 1 without gaps or repeats (the two streams interleave in any order).
func tickTockProblem(out string) string {
	next := map[string]int{"tick": 1, "tock": 1}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		word, num, _ := strings.Cut(l, " ")
		n, err := strconv.Atoi(num)
		if _, ok := next[word]; !ok || err != nil {
			return fmt.Sprintf("line %q is not the loop's", l)
		}
		if n != next[word] {
			return fmt.Sprintf("line %q after %s %d", l, word, next[word]-1)
		}
		next[word]++
	}
	if next["tick"] < 3 || next["tock"] < 3 {
		return fmt.Sprintf("only %d ticks and %d tocks", next["tick"]-1, next["tock"]-1)
	}
	return ""
}

// testLateConfigMap creates a pod whose configMap volume's ConfigMap does not exist yet: it
// must wait, and start once the ConfigMap appears, as with a kubelet.
func testLateConfigMap(ctx context.Context, t *testing.T, c labCluster) {
	create(ctx, t, c.cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sh", Image: "busybox",
			Command:      []string{"sleep", "3600"},
			VolumeMounts: []corev1.VolumeMount{{Name: "c", MountPath: "/etc/octopus-lab-test-late"}},
		}}, Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "late"}}}}}},
	})
	time.Sleep(2 * time.Second)
	if p, err := c.cs.CoreV1().Pods("default").Get(ctx, "late", metav1.GetOptions{}); err != nil || podReady(p) {
		t.Fatalf("pod with a missing ConfigMap: %v, ready %v; want it waiting", err, p != nil && podReady(p))
	}
	if _, err := c.cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "late"}, Data: map[string]string{"v": "here"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodReady(ctx, t, c.cs, "late")
	got := c.run(ctx, t, nil, "", "exec", "late", "--", "cat", "/etc/octopus-lab-test-late/v")
	if got.stdout != "here" {
		t.Errorf("late ConfigMap in the pod: %q, %q; want %q", got.stdout, got.stderr, "here")
	}
}

// clusterDNS is the kube-dns ClusterIP of a cluster: the 10th address of its service CIDR.
func clusterDNS(t *testing.T, serviceCIDR netip.Prefix) netip.Addr {
	t.Helper()
	a, err := lab.ClusterDNSAddr(serviceCIDR)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// testExecTTY execs with a terminal through client-go (kubectl needs a terminal of its own
// for -t): the command sees a tty of the size the client sets.
//
// The client sends the size on a stream of its own, and containerd's CRI applies it to the
// exec's terminal only once the process has started (there is no size at creation), so a
// command that reads the size at once can find the terminal still 0x0 on a real node. The
// command therefore waits for the size, as a program that follows its terminal's size does
// (shells and editors read it again on SIGWINCH), for at most 5 s.
func testExecTTY(ctx context.Context, t *testing.T, c labCluster, pod string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	req := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sh", Command: []string{"sh", "-c", ttySizeScript},
			Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec)
	executor, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The terminal is the command's stdin too, as with kubectl exec -it (stty reads it); the
	// test types nothing, and the pipe stays open until the command ends.
	stdin, typist := io.Pipe()
	defer typist.Close()
	err = executor.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: true,
		TerminalSizeQueue: &fixedSize{done: sctx.Done()}})
	if err != nil {
		t.Fatalf("exec with tty: %v (output %q)", err, out.String())
	}
	if !regexp.MustCompile(`^/dev/pts/\d+\r?\n40 100\r?\n$`).MatchString(out.String()) {
		t.Errorf("exec with tty: output %q, want the pts and size 40 100", out.String())
	}
}

// ttySizeScript prints the terminal and its size once it has one (rows and columns both
// non-zero; while the terminal is 0x0, coreutils' stty prints "0 0", busybox's an error).
const ttySizeScript = `tty
i=0
while [ $i -lt 100 ]; do
	size=$(stty size 2>&1)
	case "$size" in [1-9]*" "[1-9]*) break ;; esac
	i=$((i+1))
	sleep 0.05
done
echo "$size"`

// fixedSize reports one terminal size, then blocks until done (nil ends the queue).
type fixedSize struct {
	sent bool
	done <-chan struct{}
}

func (f *fixedSize) Next() *remotecommand.TerminalSize {
	if !f.sent {
		f.sent = true
		return &remotecommand.TerminalSize{Width: 100, Height: 40}
	}
	<-f.done
	return nil
}

// testLogsFollow checks that kubectl logs -f streams new lines as they are written.
func testLogsFollow(ctx context.Context, t *testing.T, c labCluster) {
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(fctx, c.kubectl, "--kubeconfig="+c.kubeconfig, "logs", "-f", "--tail=1", "toolbox")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	var ticks []int
	var got []string
	for len(ticks) < 3 && sc.Scan() {
		got = append(got, sc.Text())
		if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "tick ")); err == nil {
			ticks = append(ticks, n)
		}
	}
	if len(ticks) < 3 || ticks[1] <= ticks[0] || ticks[2] <= ticks[1] {
		t.Errorf("kubectl logs -f: lines %q; want ever-increasing ticks streamed as written", got)
	}
}

// testKubeletAuthz calls a node's kubelet API directly: a certificate of the cluster CA for a
// user without rights on nodes is refused, so is a client without a certificate, and the
// server's certificate verifies against the cluster CA.
func testKubeletAuthz(ctx context.Context, t *testing.T, c labCluster, nodeIP netip.Addr) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.CAData)
	nobody, err := tls.X509KeyPair(c.nobody.Cert, c.nobody.Key)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://%s/healthz", netip.AddrPortFrom(nodeIP, controlplane.KubeletPort))
	for _, tc := range []struct {
		what  string
		certs []tls.Certificate
		// want are the refusals that pass: 401 is a kubelet's refusal of an anonymous
		// request, 0 a failed TLS handshake (a kubelet that demands a client certificate).
		want []int
	}{
		{"certificate of a user without rights", []tls.Certificate{nobody}, []int{http.StatusForbidden}},
		{"no certificate", nil, []int{0, http.StatusUnauthorized}},
	} {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: tc.certs, MinVersion: tls.VersionTLS12}}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		code := 0
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			code = resp.StatusCode
		}
		if !slices.Contains(tc.want, code) {
			t.Errorf("%s: GET %s: status %d (err %v), want one of %v", tc.what, url, code, err, tc.want)
		}
	}
}
