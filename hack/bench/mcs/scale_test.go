package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/procfs"
)

func TestParseWrites(t *testing.T) {
	metrics := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="multicluster.x-k8s.io",resource="serviceimports",scope="resource",subresource="",verb="APPLY",version="v1beta1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="discovery.k8s.io",resource="endpointslices",scope="resource",subresource="",verb="APPLY",version="v1"} 30
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="octopus.io",resource="clusters",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="namespace",subresource="",verb="LIST",version="v1"} 900
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="resource",subresource="",verb="WATCH",version="v1"} 4
apiserver_request_duration_seconds_count{verb="POST"} 99
`
	tests := []struct {
		name    string
		text    string
		want    writeCounts
		wantErr bool
	}{
		{
			name: "write verbs only, leases apart",
			text: metrics,
			want: writeCounts{total: 51, leases: 7, byKey: map[string]int64{
				"APPLY serviceimports": 12, "APPLY endpointslices": 30, "PATCH clusters/status": 2,
			}},
		},
		{name: "no request counter", text: "process_cpu_seconds_total 3\n", wantErr: true},
		{name: "malformed value", text: `apiserver_request_total{verb="POST"} x` + "\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseWrites(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got.total != tt.want.total || got.leases != tt.want.leases || len(got.byKey) != len(tt.want.byKey) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for k, v := range tt.want.byKey {
				if got.byKey[k] != v {
					t.Errorf("%s: got %d, want %d", k, got.byKey[k], v)
				}
			}
		})
	}
}

func TestWriteCountsSub(t *testing.T) {
	before := writeCounts{total: 10, leases: 3, byKey: map[string]int64{"APPLY serviceimports": 4}}
	after := writeCounts{total: 25, leases: 5, byKey: map[string]int64{"APPLY serviceimports": 9, "PATCH clusters/status": 1}}
	d := after.sub(before)
	if d.total != 15 || d.leases != 2 || d.byKey["APPLY serviceimports"] != 5 || d.byKey["PATCH clusters/status"] != 1 {
		t.Fatalf("got %+v", d)
	}
}

func TestImportCounter(t *testing.T) {
	tests := []struct {
		name  string
		marks []struct {
			svc   string
			slice bool
		}
		want int
	}{
		{name: "import without slice is incomplete", marks: []struct {
			svc   string
			slice bool
		}{{"a", false}}, want: 0},
		{name: "import and slice complete it, in either order, once", marks: []struct {
			svc   string
			slice bool
		}{{"a", true}, {"a", false}, {"a", false}, {"a", true}, {"b", false}, {"b", true}}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newImportCounter()
			for _, m := range tt.marks {
				c.mark(m.svc, m.slice)
			}
			if n, at := c.complete(); n != tt.want || (n > 0) == at.IsZero() {
				t.Fatalf("complete() = %d, %v; want %d", n, at, tt.want)
			}
		})
	}
}

// TestReadRSS reads this test process's own /proc status: a live Go process has megabytes
// resident, and its peak is at least its current size.
func TestReadRSS(t *testing.T) {
	rss, hwm := readRSS(os.Getpid())
	if rss < 1024 || hwm < rss {
		t.Fatalf("readRSS(self) = %d kB, peak %d kB", rss, hwm)
	}
	if rss, hwm := readRSS(-1); rss != 0 || hwm != 0 {
		t.Fatalf("readRSS(-1) = %d, %d; want 0, 0", rss, hwm)
	}
}

func TestLiveHeap(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		want      int64
		wantErr   bool
	}{
		{"largest live heap of all collections", `{"level":"info","msg":"Starting"}
gc 1 @0.012s 3%: 0.010+1.2+0.003 ms clock, 0.020+0.1/0.5/0+0.006 ms cpu, 3->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 2 @1.5s 2%: 0.034+57+0.004 ms clock, 0.034+0.69/15/0+0.004 ms cpu, 67->71->35 MB, 72 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 3 @2.5s 2%: 0.034+57+0.004 ms clock, 0.034+0.69/15/0+0.004 ms cpu, 60->61->32 MB, 70 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)
`, 35, false},
		{"no trace: an error, not a zero", `{"level":"info","msg":"Starting"}` + "\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := t.TempDir() + "/agent.log"
			if err := os.WriteFile(path, []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := liveHeap(path)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("liveHeap = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestCPUAccounting(t *testing.T) {
	for name, want := range map[string]string{
		"etcd": groupEtcd, "hub-kube-apiserver": groupHubAPI, "c1-kube-apiserver": groupMemberAPI,
		"c10-kube-apiserver": groupMemberAPI, "hub-kube-controller-manager": groupKCM, "c2-kube-controller-manager": groupKCM,
		"c1-kube-scheduler": "c1-kube-scheduler",
	} {
		if got := cpuGroup(name); got != want {
			t.Errorf("cpuGroup(%q) = %q, want %q", name, got, want)
		}
	}

	dir := t.TempDir()
	// This process under a control-plane name, and a pidfile of a process that is gone.
	if err := os.WriteFile(filepath.Join(dir, "c1-kube-apiserver.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etcd.pid"), []byte("1073741824\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := sampleCPU(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Spin for 50 ms of CPU, however long the busy machine takes to give it.
	start, _ := procfs.ProcessCPU(os.Getpid())
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if now, _ := procfs.ProcessCPU(os.Getpid()); now-start >= 50*time.Millisecond {
			break
		}
	}
	after, err := sampleCPU(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	spent, sys := cpuSpent(before, after)
	// The same pid was named twice (pidfile and this program): the last naming, this program's, wins.
	if spent[groupSelf] < 40*time.Millisecond || sys.Total <= 0 {
		t.Errorf("spent %v, machine %+v: want this program's spin counted", spent, sys)
	}
	if _, ok := spent[groupEtcd]; ok {
		t.Errorf("a process that does not exist was counted: %v", spent)
	}
	row := cpuRow(spent, sys, 10)
	if !strings.Contains(row, groupSelf) || !strings.Contains(row, "per import") || !strings.Contains(row, "the machine: busy") {
		t.Errorf("report row %q", row)
	}
}
