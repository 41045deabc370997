package nodeagent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// defaultPath is the PATH of a container without one, as container runtimes set it.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// EnvCluster is set in every lab container (on real nodes by realnode's NRI plugin) to the
// name of the lab cluster it runs in, so that the echo server can say where it runs; a real
// cluster's pod would get it from its manifest (CLUSTER_NAME), which takes precedence.
const EnvCluster = "OCTOPUS_LAB_CLUSTER"

// containerEnv computes the environment of container c of pod, which runs in cluster and has
// address podIP: PATH, HOSTNAME and EnvCluster, then the container's env in order, with
// $(VAR) references to earlier variables expanded as the kubelet does. Supported sources are
// literal values and the downward API's fieldRef; configMap, secret and resource references
// and envFrom fail: the lab does not read ConfigMaps or Secrets yet.
func containerEnv(cluster string, pod *corev1.Pod, c corev1.Container, podIP string) ([]string, error) {
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("container %s: envFrom is not supported by the lab node agent", c.Name)
	}
	vars := map[string]string{"PATH": defaultPath, "HOSTNAME": pod.Name, EnvCluster: cluster}
	order := []string{"PATH", "HOSTNAME", EnvCluster}
	set := func(name, value string) {
		if _, ok := vars[name]; !ok {
			order = append(order, name)
		}
		vars[name] = value
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, vars))
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath, podIP)
			if err != nil {
				return nil, fmt.Errorf("container %s: env %s: %w", c.Name, e.Name, err)
			}
			set(e.Name, v)
		default:
			return nil, fmt.Errorf("container %s: env %s: only values and fieldRef are supported by the lab node agent", c.Name, e.Name)
		}
	}
	env := make([]string, 0, len(order))
	for _, name := range order {
		env = append(env, name+"="+vars[name])
	}
	return env, nil
}

// fieldValue answers a downward-API fieldRef.
func fieldValue(pod *corev1.Pod, path, podIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return podIP, nil
	case "status.podIPs":
		return podIP, nil
	case "status.hostIP", "status.hostIPs":
		return pod.Status.HostIP, nil
	}
	for _, m := range []struct {
		prefix string
		values map[string]string
	}{{"metadata.labels", pod.Labels}, {"metadata.annotations", pod.Annotations}} {
		if key, ok := strings.CutPrefix(path, m.prefix+"['"); ok && strings.HasSuffix(key, "']") {
			return m.values[strings.TrimSuffix(key, "']")], nil
		}
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the lab node agent", path)
}

// expand replaces $(NAME) with the value of a defined variable, turns $$ into $ and leaves
// references to undefined variables as they are: the kubelet's rules for env, command and
// args.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// expandAll applies expand to a command line.
func expandAll(args []string, env []string) []string {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, vars)
	}
	return out
}
