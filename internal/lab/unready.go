package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
)

// unreadyPods describes, for an error about pods that did not become ready, each pod of the
// namespace that is not: its node, its containers' states and restarts, and its last events,
// what `kubectl get pods -o wide` and `kubectl describe` would be run for. The lab stops at
// that error, so this is the one chance to read them. "" when there are none or the API
// server cannot be read.
func unreadyPods(ctx context.Context, cp *controlplane.ControlPlane, namespace string) string {
	// The caller's context may be what ran out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return ""
	}
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var b strings.Builder
	for i := range pods.Items {
		p := &pods.Items[i]
		if podIsReady(p) {
			continue
		}
		fmt.Fprintf(&b, "\n  pod %s on %q, %s:", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, st := range p.Status.ContainerStatuses {
			state := "running"
			switch {
			case st.State.Waiting != nil:
				state = "waiting: " + st.State.Waiting.Reason + " " + st.State.Waiting.Message
			case st.State.Terminated != nil:
				state = "terminated: " + st.State.Terminated.Reason
			}
			fmt.Fprintf(&b, " %s %s (ready %v, %d restarts);", st.Name, state, st.Ready, st.RestartCount)
		}
		b.WriteString(previousLogs(ctx, cs, p))
		events, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			continue
		}
		for _, e := range events.Items[max(0, len(events.Items)-3):] {
			fmt.Fprintf(&b, "\n    %s ×%d: %s", e.Reason, e.Count, strings.TrimSpace(e.Message))
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "\npods not ready:" + b.String()
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
