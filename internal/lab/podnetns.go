package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
)

// PodNetns names the network namespace of a running pod of the lab with the given ID, for
// `ip netns exec` and labnet.InNamespace. A pod's namespace is mounted only in
// its node's mount namespace (containerd's state dir), so it is found from a process of the
// pod (its cgroup names the pod's UID, realnode.PodProcesses) and given the same name
// (labnet.NameNamespace), which `lab down` deletes with the lab's other namespaces. A pod
// whose sandbox was recreated gets the new namespace.
func PodNetns(labID string, pod *corev1.Pod) (string, error) {
	name := labnet.PodNetnsName(labID, string(pod.UID))
	pids, err := realnode.PodProcesses(labID, string(pod.UID))
	if err != nil {
		return "", fmt.Errorf("the network namespace of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if len(pids) == 0 {
		return "", fmt.Errorf("the network namespace of pod %s/%s: no process of the pod runs", pod.Namespace, pod.Name)
	}
	// A process listed may have exited since (a container restarting, an exec ending): the
	// next one of the pod names the same namespace.
	for _, pid := range pids {
		if err = labnet.NameNamespace(name, "/proc/"+strconv.Itoa(pid)+"/ns/net"); err == nil {
			return name, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	return "", fmt.Errorf("the network namespace of pod %s/%s: %w", pod.Namespace, pod.Name, err)
}
