package lab

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// restartLogLines is how much of a restarted container's previous log unreadyPods shows: a
// process that exits on an error logs it last.
const restartLogLines = 15

// previousLogs is the end of the previous run's log of each container of p that restarted
// (what `kubectl logs --previous` shows), indented under the pod's line: the events say only
// that the container backs off, and the lab, which stops at that error, is the one chance to
// read why. "" when no container restarted or the logs cannot be read.
func previousLogs(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) string {
	var b strings.Builder
	for _, st := range p.Status.ContainerStatuses {
		if st.RestartCount == 0 {
			continue
		}
		raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{
			Container: st.Name, Previous: true, TailLines: ptr.To[int64](restartLogLines),
		}).DoRaw(ctx)
		if err != nil {
			fmt.Fprintf(&b, "\n    %s's previous log: %v", st.Name, err)
			continue
		}
		fmt.Fprintf(&b, "\n    %s's previous log (last %d lines):", st.Name, restartLogLines)
		for _, l := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
			fmt.Fprintf(&b, "\n      %s", l)
		}
	}
	return b.String()
}
