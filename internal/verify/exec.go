package verify

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// exec runs argv in m's client pod through the API server's exec subresource (WebSocket, as
// kubectl exec does) and returns its standard output. A non-zero exit is an error that
// carries the command's standard error (curl's and dig's reasons).
func (r *runner) exec(ctx context.Context, m *member, argv ...string) (string, error) {
	req := m.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.ns).Name(clientName).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(m.cfg, "GET", req.URL().String())
	if err != nil {
		return "", fmt.Errorf("exec in %s/%s: %w", m.id, clientName, err)
	}
	// The tools give up after attemptTimeout by themselves and say why; this bound is for
	// an exec that hangs.
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout+5*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("%s: %w: %s", argv[0], err, msg)
	}
	return stdout.String(), nil
}
