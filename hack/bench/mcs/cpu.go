package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/octopus-mcs/octopus/internal/procfs"
)

// cpuShare accounts the machine's CPU time over the cold start to the processes that spent it,
// to tell what bounds the cold start: the agents, or the API servers their writes land on.
type cpuShare struct {
	system procfs.SystemCPU
	// used is each process's CPU time so far, by group (see cpuGroup); a process seen only at
	// the end started after the first sample, from zero.
	used map[int]time.Duration
	// group names each pid's group.
	group map[int]string
}

// Groups of processes in the report, in its order.
const (
	groupMemberAPI = "member API servers"
	groupHubAPI    = "hub API server"
	groupEtcd      = "etcd"
	groupKCM       = "controller managers"
	groupAgents    = "agents"
	groupSelf      = "this program (watches, probes)"
)

var cpuGroups = []string{groupMemberAPI, groupHubAPI, groupEtcd, groupKCM, groupAgents, groupSelf}

// sampleCPU reads the CPU time of the control-plane processes (by the pidfiles in pidsDir),
// of agentPids and of this program, and of the whole machine.
func sampleCPU(pidsDir string, agentPids []int) (cpuShare, error) {
	s := cpuShare{used: map[int]time.Duration{}, group: map[int]string{}}
	files, err := filepath.Glob(filepath.Join(pidsDir, "*.pid"))
	if err != nil {
		return cpuShare{}, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the process is being restarted
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return cpuShare{}, fmt.Errorf("pidfile %s: %w", f, err)
		}
		s.group[pid] = cpuGroup(strings.TrimSuffix(filepath.Base(f), ".pid"))
	}
	for _, pid := range agentPids {
		s.group[pid] = groupAgents
	}
	s.group[os.Getpid()] = groupSelf
	for pid := range s.group {
		if t, err := procfs.ProcessCPU(pid); err == nil {
			s.used[pid] = t
		}
	}
	s.system, err = procfs.ReadSystemCPU()
	return s, err
}

// cpuGroup is the group of a control-plane process by its pidfile's name (<cluster>-<binary>).
func cpuGroup(name string) string {
	switch {
	case name == "etcd":
		return groupEtcd
	case strings.HasSuffix(name, "-kube-controller-manager"):
		return groupKCM
	case name == "hub-kube-apiserver":
		return groupHubAPI
	case strings.HasSuffix(name, "-kube-apiserver"):
		return groupMemberAPI
	}
	return name
}

// cpuSpent is, per group, the CPU time spent between before and end, and the machine's.
func cpuSpent(before, end cpuShare) (map[string]time.Duration, procfs.SystemCPU) {
	out := map[string]time.Duration{}
	for pid, t := range end.used {
		out[end.group[pid]] += t - before.used[pid]
	}
	return out, end.system.Sub(before.system)
}

// cpuRow is the report's line on where the CPU went, with each group's time per import.
func cpuRow(spent map[string]time.Duration, sys procfs.SystemCPU, imports int) string {
	var parts []string
	groups := slices.Clone(cpuGroups)
	for g := range spent {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		if t, ok := spent[g]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f s (%.1f ms per import)", g, t.Seconds(), float64(t.Milliseconds())/float64(imports)))
		}
	}
	busy := sys.Total - sys.Idle - sys.Steal
	return fmt.Sprintf("%s; the machine: busy %.0f s, idle %.0f s, stolen by the hypervisor %.0f s", strings.Join(parts, ", "), busy.Seconds(), sys.Idle.Seconds(), sys.Steal.Seconds())
}
