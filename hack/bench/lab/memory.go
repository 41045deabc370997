package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
	"github.com/octopus-mcs/octopus/internal/procfs"
)

// Process kinds of the memory table, in the order it lists them.
const (
	kindEtcd       = "etcd"
	kindAPIServer  = "kube-apiserver"
	kindKCM        = "kube-controller-manager"
	kindScheduler  = "kube-scheduler"
	kindKubeProxy  = "kube-proxy"
	kindKubelet    = "kubelet"
	kindContainerd = "containerd"
	kindShim       = "containerd-shim-runc-v2"
	kindAgent      = "octopus-agent controller"
	kindGateway    = "octopus-agent gateway"
	kindRouteAgent = "octopus-agent route-agent"
	kindPods       = "pod processes"
	kindOther      = "other"
	// kindInProcess is the process that called lab.Up: the lab's image registry and its
	// nodes' NRI plugin run as goroutines in it, so its memory is part of the lab's.
	kindInProcess = "lab.Up caller (registry, NRI plugin)"
)

var kinds = []string{kindEtcd, kindAPIServer, kindKCM, kindScheduler, kindKubeProxy, kindKubelet, kindContainerd, kindShim, kindAgent, kindGateway,
	kindRouteAgent, kindPods, kindOther, kindInProcess}

// usage is the memory of the processes of one kind.
type usage struct {
	Procs    int
	RSS, PSS int64 // bytes
}

// labMemory sums the memory of every process of the lab in dir (with lab ID id), by kind. It
// finds them as lab.Down does: by the pidfiles the control-plane environment writes (etcd,
// API servers, controller managers, schedulers, agents, gateways, route agents, kube-proxies)
// and by their network namespace (every process in a lab namespace is the lab's: kube-proxies,
// gateways, route agents, pod containers and whatever they forked). PSS shares the pages the
// processes have in common (the same binary mapped by many) fairly; RSS counts them in each.
func labMemory(dir, id string) (map[string]usage, error) {
	pids := map[int]string{} // pid → its network namespace, "" for the root one
	files, err := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	if err != nil {
		return nil, fmt.Errorf("listing the lab's pidfiles: %w", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the process exited and its pidfile went with it
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || !procfs.Alive(pid) {
			continue
		}
		pids[pid] = ""
	}
	namespaces, err := labnet.ListNamespaces(labnet.NetnsOwnerPrefix(id))
	if err != nil {
		return nil, fmt.Errorf("listing the lab's namespaces: %w", err)
	}
	inodes := map[uint64]string{}
	for _, n := range namespaces {
		var st unix.Stat_t
		if unix.Stat(labnet.NetnsPath(n), &st) == nil {
			inodes[st.Ino] = n
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil {
			continue // gone meanwhile
		}
		if ns, ours := inodes[st.Ino]; ours && procfs.Alive(pid) {
			pids[pid] = ns
		}
	}
	// Real nodes' pods run in network namespaces only their containerd knows; the lab's
	// cgroups hold them (and containerd and its shims, which their command lines tell apart).
	inCgroups, err := realnode.CgroupProcesses(id)
	if err != nil {
		return nil, err
	}
	for _, pid := range inCgroups {
		if _, ok := pids[pid]; !ok {
			pids[pid] = podCgroup
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process of the lab found in %s/pids or in its %d namespaces: is the lab running?", dir, len(namespaces))
	}
	out := map[string]usage{}
	add := func(kind string, pid int) error {
		rss, pss, err := readMemory(pid)
		if err != nil {
			return err
		}
		u := out[kind]
		u.Procs, u.RSS, u.PSS = u.Procs+1, u.RSS+rss, u.PSS+pss
		out[kind] = u
		return nil
	}
	podPrefix := labnet.PodNetnsPrefix(id)
	for pid, ns := range pids {
		args, err := procfs.Cmdline(pid)
		if err != nil {
			continue // exited since we listed it
		}
		if err := add(classify(args, ns, podPrefix), pid); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if err := add(kindInProcess, os.Getpid()); err != nil {
		return nil, err
	}
	return out, nil
}

// podCgroup stands for the network namespace of a process found only in the lab's cgroups: a
// real node's pod, unless its command line says containerd or a shim.
const podCgroup = "\x00cgroup"

// classify names the kind of a lab process from its command line and network namespace.
func classify(args []string, netns, podPrefix string) string {
	if netns != "" && strings.HasPrefix(netns, podPrefix) {
		return kindPods
	}
	if len(args) == 0 {
		return kindOther
	}
	switch filepath.Base(args[0]) {
	case "kubelet":
		return kindKubelet
	case "containerd":
		return kindContainerd
	case "containerd-shim-runc-v2":
		return kindShim
	}
	if netns == podCgroup {
		return kindPods
	}
	switch filepath.Base(args[0]) {
	case "etcd":
		return kindEtcd
	case "kube-apiserver":
		return kindAPIServer
	case "kube-controller-manager":
		return kindKCM
	case "kube-scheduler":
		return kindScheduler
	case "kube-proxy":
		return kindKubeProxy
	case "octopus-agent":
		if len(args) > 1 {
			switch args[1] {
			case "controller":
				return kindAgent
			case "gateway":
				return kindGateway
			case "route-agent":
				return kindRouteAgent
			}
		}
	}
	return kindOther
}

// readMemory returns the RSS and PSS of pid in bytes, from /proc/<pid>/smaps_rollup.
func readMemory(pid int) (rss, pss int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the memory of pid %d (needs root and Linux ≥ 4.14): %w", pid, err)
	}
	return parseSmapsRollup(b)
}

// parseSmapsRollup reads the Rss and Pss lines (in kB) of a smaps_rollup file.
func parseSmapsRollup(b []byte) (rss, pss int64, err error) {
	var haveRSS, havePSS bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("smaps_rollup line %q: %w", sc.Text(), err)
		}
		switch f[0] {
		case "Rss:":
			rss, haveRSS = v*1024, true
		case "Pss:":
			pss, havePSS = v*1024, true
		}
	}
	if !haveRSS || !havePSS {
		return 0, 0, errors.New("smaps_rollup has no Rss or Pss line")
	}
	return rss, pss, nil
}
