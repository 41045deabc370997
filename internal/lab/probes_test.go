package lab_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// testLivenessAndStartup runs, on a lab cluster, the probes that restart containers: a
// container whose liveness probe starts failing is killed and restarted; a container with a
// startup probe is neither started nor ready, and its liveness probe does not run, until the
// startup probe passes (here once kubectl exec creates the file it tests for); one whose
// startup probe never passes is killed and restarted, never started.
func testLivenessAndStartup(ctx context.Context, t *testing.T, cs kubernetes.Interface, kubectl labCluster) {
	const dir = "/var/lib/octopus-lab-test/probe"
	withProbeDir := func(name string, c corev1.Container) *corev1.Pod {
		c.Image = "busybox:1.37"
		c.VolumeMounts = []corev1.VolumeMount{{Name: "probe", MountPath: dir}}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				// A killed container gets a second between SIGTERM and SIGKILL.
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Volumes:                       []corev1.Volume{{Name: "probe", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Containers:                    []corev1.Container{c},
			},
		}
	}
	failing := func(period, failures int32, argv ...string) *corev1.Probe {
		pr := execProbe(period, argv...)
		pr.FailureThreshold = failures
		return pr
	}
	// Alive for 3 s after each start, then its liveness probe fails.
	create(ctx, t, cs, withProbeDir("liveness", corev1.Container{Name: "app",
		Command:       []string{"sh", "-c", "touch " + dir + "/alive; sleep 3; rm " + dir + "/alive; exec sleep 3600"},
		LivenessProbe: failing(1, 2, "test", "-f", dir+"/alive"),
	}))
	// Started once the test creates the file; its liveness probe would fail at once.
	create(ctx, t, cs, withProbeDir("startup", corev1.Container{Name: "app", Command: []string{"sleep", "3600"},
		StartupProbe:  failing(1, 120, "test", "-f", dir+"/started"),
		LivenessProbe: failing(1, 1, "test", "-f", dir+"/started"),
	}))
	create(ctx, t, cs, withProbeDir("never-starts", corev1.Container{Name: "app", Command: []string{"sleep", "3600"},
		StartupProbe: failing(1, 2, "sh", "-c", "exit 1"),
	}))

	restarted := func(p *corev1.Pod) bool {
		st := p.Status.ContainerStatuses
		return len(st) == 1 && st[0].RestartCount >= 1 && st[0].LastTerminationState.Terminated != nil
	}
	for _, name := range []string{"liveness", "never-starts"} {
		p := waitPod(ctx, t, cs, name, restarted)
		st := p.Status.ContainerStatuses[0]
		t.Logf("pod %s: restarted %d times, last exit code %d", name, st.RestartCount, st.LastTerminationState.Terminated.ExitCode)
		if name == "never-starts" && (ptr.Deref(st.Started, false) || st.Ready) {
			t.Errorf("pod %s, whose startup probe never passes: started %v, ready %t", name, ptr.Deref(st.Started, false), st.Ready)
		}
	}

	p := waitPod(ctx, t, cs, "startup", allContainersRunning)
	time.Sleep(time.Until(latestStart(p).Add(3 * time.Second)))
	p, err := cs.CoreV1().Pods("default").Get(ctx, "startup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Status.ContainerStatuses[0]; ptr.Deref(st.Started, false) || st.Ready || st.RestartCount != 0 {
		t.Errorf("pod startup before its startup probe passed: started %v, ready %t, restarts %d; want not started, not ready, never restarted (its liveness probe must wait)",
			ptr.Deref(st.Started, false), st.Ready, st.RestartCount)
	}
	if res := kubectl.run(ctx, t, nil, "", "exec", "startup", "--", "touch", dir+"/started"); res.code != 0 {
		t.Fatalf("kubectl exec touch %s/started: exit %d, stderr %q", dir, res.code, res.stderr)
	}
	p = waitPodReady(ctx, t, cs, "startup")
	if st := p.Status.ContainerStatuses[0]; !ptr.Deref(st.Started, false) || st.RestartCount != 0 {
		t.Errorf("pod startup after its startup probe passed: started %v, restarts %d; want started, never restarted", ptr.Deref(st.Started, false), st.RestartCount)
	}
}
