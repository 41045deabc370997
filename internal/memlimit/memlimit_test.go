package memlimit

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

func TestCgroupLimit(t *testing.T) {
	const mib = 1 << 20
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name    string
		files   fstest.MapFS
		want    int64
		wantErr string
	}{
		{"v2 in a container: the namespace's root holds the limit", fstest.MapFS{
			"proc/self/cgroup":            file("0::/\n"),
			"sys/fs/cgroup/memory.max":    file("209715200\n"),
			"sys/fs/cgroup/cgroup.procs":  file("1\n"),
			"sys/fs/cgroup/memory.events": file("oom 0\n"),
		}, 200 * mib, ""},
		{"v2 nested: the tighter ancestor wins", fstest.MapFS{
			"proc/self/cgroup": file("0::/kubepods/pod1/agent\n"),
			"sys/fs/cgroup/kubepods/pod1/agent/memory.max": file("max\n"),
			"sys/fs/cgroup/kubepods/pod1/memory.max":       file("314572800\n"),
			"sys/fs/cgroup/kubepods/memory.max":            file("1073741824\n"),
		}, 300 * mib, ""},
		{"v2 without any limit", fstest.MapFS{
			"proc/self/cgroup":                    file("0::/user.slice\n"),
			"sys/fs/cgroup/user.slice/memory.max": file("max\n"),
		}, 0, ""},
		{"v1 memory controller, unlimited above", fstest.MapFS{
			"proc/self/cgroup": file("4:memory:/agent\n3:cpu,cpuacct:/agent\n0::/\n"),
			"sys/fs/cgroup/memory/agent/memory.limit_in_bytes": file("268435456\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":       file(strconv.FormatInt(unlimited, 10) + "\n"),
		}, 256 * mib, ""},
		{"v1 unlimited", fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file(strconv.FormatInt(unlimited, 10) + "\n"),
		}, 0, ""},
		{"no cgroup file systems mounted", fstest.MapFS{
			"proc/self/cgroup": file("0::/\n"),
		}, 0, ""},
		{"garbage in a limit file is an error, not no limit", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("lots\n"),
		}, 0, `"lots" is not a number`},
		{"unreadable /proc/self/cgroup line", fstest.MapFS{
			"proc/self/cgroup": file("nonsense\n"),
		}, 0, "unexpected line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CgroupLimit(tc.files)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("CgroupLimit = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// childEnv makes the test binary, run as a child, print what Set did and exit.
const childEnv = "OCTOPUS_MEMLIMIT_CHILD"

// ballastSize is what the child allocates and touches.
const ballastSize = 64 << 20

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// Touched, so that the cgroup's peak has something to show.
		ballast := make([]byte, ballastSize)
		for i := 0; i < len(ballast); i += 4096 {
			ballast[i] = 1
		}
		set, err := Set(DefaultRatio)
		fmt.Printf("%d %d %v\n", set, debug.SetMemoryLimit(-1), err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSetInARealCgroup runs a process in a memory cgroup of its own with a 300 MiB limit, as a
// container runtime would, and checks that its runtime's soft limit becomes 90 % of it, that
// GOMEMLIMIT, when set, wins, and that the cgroup's peak shows the memory the child touched.
func TestSetInARealCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating a memory cgroup needs root; CI runs as root")
	}
	const limit = 300 << 20
	cg, err := NewCgroup(limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.Remove(); err != nil {
			t.Error(err)
		}
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(extraEnv ...string) string {
		cmd := cg.Command(t.Context(), self)
		cmd.Env = append(os.Environ(), append([]string{childEnv + "=1"}, extraEnv...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child in cgroup %s: %v\n%s", cg.Dir, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	want := int64(limit * DefaultRatio)
	if got := run(); got != fmt.Sprintf("%d %d <nil>", want, want) {
		t.Errorf("in a %d-byte cgroup: Set and the runtime's limit = %q, want %d for both", limit, got, want)
	}
	if got := run("GOMEMLIMIT=123MiB"); got != fmt.Sprintf("0 %d <nil>", 123<<20) {
		t.Errorf("with GOMEMLIMIT=123MiB: %q, want Set to leave the runtime's 123 MiB alone", got)
	}
	if peak, err := cg.Peak(); err != nil || peak < ballastSize || peak > limit {
		t.Errorf("cgroup peak = %d, %v; want between the child's %d touched bytes and the %d limit", peak, err, ballastSize, limit)
	}
}
