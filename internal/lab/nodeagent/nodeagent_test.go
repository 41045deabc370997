package nodeagent

import (
	"errors"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakePath resolves a fixed set of host programs to /host/<name>.
func fakePath(names ...string) func(string) (string, error) {
	return func(n string) (string, error) {
		if slices.Contains(names, n) {
			return "/host/" + n, nil
		}
		return "", exec.ErrNotFound
	}
}

func TestArgv(t *testing.T) {
	im := Images{EchoBinary: "/dev/null", lookPath: fakePath("busybox", "socat", "sleep", "bash")}
	for _, tc := range []struct {
		name    string
		c       corev1.Container
		want    []string
		missing string // part of the error of a missing binary
	}{
		{"busybox default is sh", corev1.Container{Image: "busybox"}, []string{"/host/busybox", "sh"}, ""},
		{"busybox command runs as an applet", corev1.Container{Image: "docker.io/library/busybox:1.37",
			Command: []string{"/bin/sh", "-c", "sleep 1"}}, []string{"/host/busybox", "sh", "-c", "sleep 1"}, ""},
		{"socat args follow the entrypoint", corev1.Container{Image: "alpine/socat:latest",
			Args: []string{"TCP-LISTEN:7000", "EXEC:cat"}}, []string{"/host/socat", "TCP-LISTEN:7000", "EXEC:cat"}, ""},
		{"command replaces entrypoint and cmd", corev1.Container{Image: "alpine/socat", Command: []string{"bash"}},
			[]string{"/host/bash"}, ""},
		{"pause sleeps", corev1.Container{Image: "registry.k8s.io/pause:3.10"}, []string{"/host/sleep", "infinity"}, ""},
		{"netshoot sleeps", corev1.Container{Image: "nicolaka/netshoot@sha256:abc"}, []string{"/host/sleep", "infinity"}, ""},
		{"echo from its binary", corev1.Container{Image: EchoImage + ":v1", Args: []string{"--http-port=80"}},
			[]string{"/dev/null", "--http-port=80"}, ""},
		{"unknown image with a host command", corev1.Container{Image: "example.com/x", Command: []string{"sleep", "5"}},
			[]string{"/host/sleep", "5"}, ""},
		{"unknown image without command", corev1.Container{Image: "example.com/x"}, nil, "no command"},
		{"missing binary names its package", corev1.Container{Image: "example.com/x", Command: []string{"curl"}}, nil, "Debian package curl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := im.Argv(tc.c)
			if tc.missing != "" {
				if !errors.Is(err, errBinaryNotFound) || !strings.Contains(err.Error(), tc.missing) {
					t.Fatalf("err = %v, want errBinaryNotFound mentioning %q", err, tc.missing)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Argv = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := (Images{lookPath: fakePath()}).Argv(corev1.Container{Image: EchoImage}); !errors.Is(err, errBinaryNotFound) {
		t.Errorf("echo without EchoBinary: err = %v, want errBinaryNotFound", err)
	}
}

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "cluster1-node2"},
	}
	field := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
	}
	c := corev1.Container{Name: "app", Env: []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "NODE", ValueFrom: field("spec.nodeName")},
		{Name: "APP", ValueFrom: field("metadata.labels['app']")},
		{Name: "URL", Value: "http://$(POD_IP):80/$(UNDEFINED)/$$(POD_IP)"},
	}}
	env, err := containerEnv("cluster1", pod, c, "10.1.1.5")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"HOSTNAME=web-1", EnvCluster + "=cluster1", "POD_IP=10.1.1.5", "NODE=cluster1-node2",
		"APP=web", "URL=http://10.1.1.5:80/$(UNDEFINED)/$(POD_IP)"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %q lacks %q", env, want)
		}
	}
	if got := expandAll([]string{"echo $(NODE)"}, env); got[0] != "echo cluster1-node2" {
		t.Errorf("expandAll = %q", got)
	}
	c.Env = []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
	if _, err := containerEnv("cluster1", pod, c, "10.1.1.5"); err == nil {
		t.Error("a secret reference was accepted")
	}
}

func TestPhase(t *testing.T) {
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}}
	term := func(code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	restarting := waiting
	restarting.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1}
	for _, tc := range []struct {
		in   []corev1.ContainerStatus
		want corev1.PodPhase
	}{
		{[]corev1.ContainerStatus{waiting, running}, corev1.PodPending},
		{[]corev1.ContainerStatus{running, term(0)}, corev1.PodRunning},
		{[]corev1.ContainerStatus{restarting}, corev1.PodRunning},
		{[]corev1.ContainerStatus{term(0), term(1)}, corev1.PodFailed},
		{[]corev1.ContainerStatus{term(0)}, corev1.PodSucceeded},
	} {
		if got := phase(tc.in); got != tc.want {
			t.Errorf("phase(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestAllocate(t *testing.T) {
	cidr := netip.MustParsePrefix("10.1.2.0/30")
	used := map[netip.Addr]bool{netip.MustParseAddr("10.1.2.1"): true}
	ip, err := allocate(cidr, used)
	if err != nil || ip != netip.MustParseAddr("10.1.2.2") {
		t.Fatalf("allocate = %s, %v; want 10.1.2.2", ip, err)
	}
	used[ip] = true
	if ip, err := allocate(cidr, used); err == nil {
		t.Fatalf("allocate from a full /30 returned %s (the broadcast address?)", ip)
	}
}

func TestRepository(t *testing.T) {
	for in, want := range map[string]string{
		"busybox": "busybox", "busybox:1.37": "busybox", "docker.io/library/busybox@sha256:1": "busybox",
		"localhost:5000/x/y:1": "localhost:5000/x/y", EchoImage + ":v0.1": EchoImage,
	} {
		if got := repository(in); got != want {
			t.Errorf("repository(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestToolboxTools checks that a toolbox pod in the lab has what a toolbox image ships: each
// tool resolves on this machine (hack/install-deps.sh installs them), and a missing one is
// reported with its Debian package.
func TestToolboxTools(t *testing.T) {
	for _, tool := range toolboxTools {
		c := corev1.Container{Image: "nicolaka/netshoot", Command: []string{tool}}
		argv, err := Images{}.Argv(c)
		if err != nil {
			t.Errorf("toolbox %s: %v", tool, err)
			continue
		}
		t.Logf("toolbox %s is %s", tool, argv[0])
		if _, err := (Images{lookPath: fakePath()}).Argv(c); err == nil || !strings.Contains(err.Error(), "Debian package "+debianPackages[tool]) {
			t.Errorf("toolbox %s missing: err = %v, want one naming Debian package %q", tool, err, debianPackages[tool])
		}
	}
}
