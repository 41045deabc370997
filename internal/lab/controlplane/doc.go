// Package controlplane starts real Kubernetes control planes on one Linux machine: one etcd
// shared by all clusters and, per cluster, a kube-apiserver with its own etcd prefix, a
// kube-controller-manager and optionally a kube-scheduler. Tests use it through
// internal/testenv; `octopus lab` uses it to run the hub and member clusters.
//
// Every child process is started with Pdeathsig=SIGKILL and its own process group, logs to a
// file under <Dir>/logs and has a pidfile under <Dir>/pids, so that a crashed parent leaves
// nothing running and a later run (CleanupStale) can still find and remove whatever an
// unusual crash left behind. The package is Linux-only (Pdeathsig, /proc).
package controlplane
