package main

import (
	"os/exec"
	"slices"
	"testing"
)

func TestClassify(t *testing.T) {
	const podPrefix = "octo-abc-pod-"
	tests := []struct {
		name  string
		args  []string
		netns string
		want  string
	}{
		{name: "etcd by path", args: []string{"/root/.cache/octopus/bin/etcd", "--data-dir=/x"}, want: kindEtcd},
		{name: "api server", args: []string{"/b/kube-apiserver", "--etcd-prefix=/hub"}, want: kindAPIServer},
		{name: "controller manager", args: []string{"/b/kube-controller-manager"}, want: kindKCM},
		{name: "scheduler", args: []string{"/b/kube-scheduler"}, want: kindScheduler},
		{name: "kube-proxy in a node namespace", args: []string{"/b/kube-proxy"}, netns: "octo-abc-c1-n1", want: kindKubeProxy},
		{name: "agent controller", args: []string{"/t/octopus-agent", "controller", "--kubeconfig", "k"}, want: kindAgent},
		{name: "gateway", args: []string{"/t/octopus-agent", "gateway"}, netns: "octo-abc-c1-n1", want: kindGateway},
		{name: "route agent", args: []string{"/t/octopus-agent", "route-agent"}, netns: "octo-abc-c1-n2", want: kindRouteAgent},
		{name: "agent without a subcommand", args: []string{"/t/octopus-agent"}, want: kindOther},
		{name: "anything in a pod namespace is a pod", args: []string{"/t/octopus-agent", "gateway"}, netns: podPrefix + "uid", want: kindPods},
		{name: "busybox in a pod", args: []string{"busybox", "sleep", "3600"}, netns: podPrefix + "uid", want: kindPods},
		{name: "unknown process in a node namespace", args: []string{"/bin/sh"}, netns: "octo-abc-c1-n1", want: kindOther},
		{name: "no command line", args: nil, netns: "octo-abc-c1-n1", want: kindOther},
		{name: "kubelet", args: []string{"/c/kubelet", "--config=/x"}, netns: "octo-abc-c1-n1", want: kindKubelet},
		{name: "containerd, also found in a cgroup", args: []string{"/c/containerd", "--config", "/x"}, netns: podCgroup, want: kindContainerd},
		{name: "shim in a cgroup", args: []string{"/c/containerd-shim-runc-v2", "-namespace", "k8s.io"}, netns: podCgroup, want: kindShim},
		{name: "a real node's pod, found by its cgroup", args: []string{"sleep", "3600"}, netns: podCgroup, want: kindPods},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.args, tt.netns, podPrefix); got != tt.want {
				t.Errorf("classify(%q, %q) = %q, want %q", tt.args, tt.netns, got, tt.want)
			}
		})
	}
}

func TestParseSmapsRollup(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		rss, pss int64
		wantErr  bool
	}{
		{name: "kernel format", in: "55d0c0000000-7ffd9b7fe000 ---p 00000000 00:00 0                          [rollup]\n" +
			"Rss:              274604 kB\nPss:              250012 kB\nPss_Anon:         200000 kB\nShared_Clean:      24592 kB\n",
			rss: 274604 * 1024, pss: 250012 * 1024},
		{name: "no Pss", in: "Rss: 10 kB\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "bad number", in: "Rss: x kB\nPss: 1 kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rss, pss, err := parseSmapsRollup([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tt.wantErr)
			}
			if rss != tt.rss || pss != tt.pss {
				t.Errorf("got rss %d pss %d, want %d %d", rss, pss, tt.rss, tt.pss)
			}
		})
	}
}

// TestReadMemoryOfChild reads the memory of a process started as the lab starts its own: a
// child of this one.
func TestReadMemoryOfChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rss, pss, err := readMemory(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || pss <= 0 || pss > rss {
		t.Errorf("sleep: rss %d pss %d: want 0 < pss <= rss", rss, pss)
	}
}

func TestParseSizes(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "2,4", want: []int{2, 4}},
		{in: " 3 ", want: []int{3}},
		{in: "0", wantErr: true},
		{in: "2,x", wantErr: true},
		{in: "16", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseSizes(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v (error: %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
