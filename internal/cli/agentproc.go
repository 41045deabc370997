package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/octopus-mcs/octopus/internal/procfs"
)

// `join --agent process`, a development mode (the default is the member chart), runs the
// agent's controller as a detached process on the user's machine. Its pidfile lets `leave` stop exactly that
// process: the PID is only signalled if its command line is still the agent's.

type agentProc struct {
	pid int
	log string
}

// stateDir is where detached agents keep pidfiles and logs.
func stateDir() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding a state directory: %w", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	dir := filepath.Join(base, "octopus")
	return dir, os.MkdirAll(dir, 0o700)
}

// agentBinary finds octopus-agent next to this executable, then in PATH.
func agentBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		candidate := filepath.Join(filepath.Dir(self), "octopus-agent")
		if _, err := os.Stat(candidate); err == nil {
			return candidate, nil
		}
	}
	if p, err := exec.LookPath("octopus-agent"); err == nil {
		return p, nil
	}
	return "", errors.New("octopus-agent not found next to octopus or in PATH; run `make build`, or join with --agent none")
}

func startDetachedAgent(kube kubeconfigFlags, clusterID string) (*agentProc, error) {
	bin, err := agentBinary()
	if err != nil {
		return nil, err
	}
	dir, err := stateDir()
	if err != nil {
		return nil, err
	}
	kubeconfig, err := agentKubeconfig(kube, dir, clusterID)
	if err != nil {
		return nil, err
	}
	if err := stopDetachedAgent(clusterID); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "agent-"+clusterID+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the agent log: %w", err)
	}
	defer logFile.Close()
	// Several clusters' agents may run on this machine, and the default metrics port can be
	// bound only once.
	cmd := exec.Command(bin, "controller", "--kubeconfig", kubeconfig, "--metrics-bind-address", "0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own session: the agent outlives this command and the terminal it ran in.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	if err := os.WriteFile(agentPidfile(dir, clusterID), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		return nil, fmt.Errorf("recording the agent's pid: %w", err)
	}
	return &agentProc{pid: pid, log: logPath}, nil
}

// agentKubeconfig writes the one context join used (--kubeconfig, --context, $KUBECONFIG
// merging all resolved) into a self-contained file for the agent, so that the agent talks to
// the cluster that joined even if the user's current context changes later.
func agentKubeconfig(kube kubeconfigFlags, dir, clusterID string) (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kube.path
	raw, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kube.context}).RawConfig()
	if err != nil {
		return "", fmt.Errorf("loading kubeconfig for the agent: %w", err)
	}
	if kube.context != "" {
		raw.CurrentContext = kube.context
	}
	if err := clientcmdapi.MinifyConfig(&raw); err != nil {
		return "", fmt.Errorf("selecting the kubeconfig context for the agent: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(&raw); err != nil {
		return "", fmt.Errorf("inlining kubeconfig credentials for the agent: %w", err)
	}
	path := filepath.Join(dir, "agent-"+clusterID+".kubeconfig")
	if err := clientcmd.WriteToFile(raw, path); err != nil {
		return "", fmt.Errorf("writing the agent's kubeconfig: %w", err)
	}
	return path, os.Chmod(path, 0o600)
}

func agentPidfile(dir, clusterID string) string {
	return filepath.Join(dir, "agent-"+clusterID+".pid")
}

// stopDetachedAgent stops the agent a previous join started for clusterID, if it still runs.
func stopDetachedAgent(clusterID string) error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	pidfile := agentPidfile(dir, clusterID)
	data, err := os.ReadFile(pidfile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return os.Remove(pidfile)
	}
	if isAgent(pid) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for isAgent(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if isAgent(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return os.Remove(pidfile)
}

// isAgent reports whether pid is a live octopus-agent controller (not a zombie, not a reused PID).
func isAgent(pid int) bool {
	if !procfs.Alive(pid) {
		return false
	}
	args, err := procfs.Cmdline(pid)
	return err == nil && len(args) > 1 && filepath.Base(args[0]) == "octopus-agent" && args[1] == "controller"
}
