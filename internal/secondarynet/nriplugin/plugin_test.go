package nriplugin

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

var testConfig = Config{
	ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/16"),
	Routes: []netip.Prefix{netip.MustParsePrefix("10.113.0.0/16")},
	Node:   podport.Node{Bridge: "br-int"}, MTU: 1400, AddressWait: 300 * time.Millisecond,
}

// fakePods serves the pod's successive versions, one per read, the last one from then on.
type fakePods struct {
	versions []*corev1.Pod
	err      error
	reads    int
}

func (f *fakePods) Get(context.Context, string, string) (*corev1.Pod, error) {
	f.reads++
	if f.err != nil {
		return nil, f.err
	}
	return f.versions[min(f.reads, len(f.versions))-1], nil
}

type fakeInterfaces struct {
	mu       sync.Mutex // Detach runs in the plugin's goroutines
	attached []podport.Attachment
	detached []string
	kept     map[string]bool
	inPlace  map[string]bool // the sandboxes Sweep leaves attached
	sweeps   int
	err      error
}

func (f *fakeInterfaces) Sweep(_ context.Context, _ podport.Node, keep map[string]bool) ([]string, map[string]bool, error) {
	f.sweeps++
	f.kept = keep
	return nil, f.inPlace, f.err
}

func (f *fakeInterfaces) Attach(_ context.Context, a podport.Attachment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.attached = append(f.attached, a)
	return nil
}

func (f *fakeInterfaces) Detach(_ context.Context, _ podport.Node, sandbox string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detached = append(f.detached, sandbox)
	return f.err
}

func sandbox(ns string, annotations map[string]string, network bool) *api.PodSandbox {
	sb := &api.PodSandbox{Id: "0123456789abcdef", Name: "web", Namespace: ns, Uid: "uid-1", Pid: 4242,
		Annotations: annotations, Linux: &api.LinuxPodSandbox{}}
	if network {
		sb.Linux.Namespaces = []*api.LinuxNamespace{{Type: "network", Path: "/var/run/netns/cni-1"}}
	}
	return sb
}

func pod(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-1", Annotations: annotations}}
}

func withAddress(ip string) map[string]string {
	v, err := podnet.Set("", &podnet.Status{Name: podnet.NetworkName, Interface: "net1", IPs: []string{ip}, MAC: "0a:58:0a:70:00:05"})
	if err != nil {
		panic(err)
	}
	return map[string]string{podnet.NetworkStatusAnnotation: v}
}

func TestRunPodSandbox(t *testing.T) {
	addressed := pod(withAddress("10.112.0.5"))
	for _, tc := range []struct {
		name     string
		sandbox  *api.PodSandbox
		pods     *fakePods
		attachEr error
		wantErr  string // "" for success
		attach   bool
	}{
		{name: "pod with its address gets net1", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{addressed}}, attach: true},
		{name: "address written while the sandbox waits", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{pod(nil), pod(nil), addressed}}, attach: true},
		{name: "host network pod is not touched", sandbox: sandbox("default", nil, false), pods: &fakePods{}},
		{name: "system pod is not touched", sandbox: sandbox("kube-system", nil, true), pods: &fakePods{}},
		{name: "opted out in the sandbox's annotations", sandbox: sandbox("default", map[string]string{podnet.OptOutAnnotation: "false"}, true),
			pods: &fakePods{}},
		{name: "opted out on the pod since", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{pod(map[string]string{podnet.OptOutAnnotation: "false"})}}},
		{name: "the ovnmaster's refusal fails the sandbox with its reason", sandbox: sandbox("default", nil, true),
			pods:    &fakePods{versions: []*corev1.Pod{pod(map[string]string{podnet.ErrorAnnotation: "address 10.9.0.1 is outside the block"})}},
			wantErr: "address 10.9.0.1 is outside the block"},
		{name: "no address in time", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{pod(nil)}}, wantErr: "has not given it an address yet"},
		{name: "API server unreachable", sandbox: sandbox("default", nil, true),
			pods: &fakePods{err: errors.New("connection refused")}, wantErr: "connection refused"},
		{name: "pod gone", sandbox: sandbox("default", nil, true),
			pods:    &fakePods{err: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web")},
			wantErr: "not found"},
		{name: "another pod of the same name", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "uid-2"}}}}, wantErr: "UID uid-2"},
		{name: "the pod that went before under that name, then the sandbox's (a watch catching up)", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "uid-0"}}, addressed}}, attach: true},
		{name: "address outside the block", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{pod(withAddress("10.9.0.5"))}}, wantErr: "not in the cluster's secondary block"},
		{name: "OVS fails", sandbox: sandbox("default", nil, true), pods: &fakePods{versions: []*corev1.Pod{addressed}},
			attachEr: errors.New("ovs-vsctl: no bridge br-int"), wantErr: "no bridge br-int"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ifaces := &fakeInterfaces{err: tc.attachEr}
			// The failures wait out testConfig's short AddressWait (some retry until then).
			// A success ends as soon as the address is read, long before a minute, which a
			// loaded machine (CI runs the labs beside this test) polling late cannot outlast.
			cfg := testConfig
			if tc.wantErr == "" {
				cfg.AddressWait = time.Minute
			}
			p, err := New(cfg, tc.pods, ifaces, testr.New(t))
			if err != nil {
				t.Fatal(err)
			}
			err = p.RunPodSandbox(context.Background(), tc.sandbox)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("RunPodSandbox: %v", err)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "default/web") {
					t.Fatalf("RunPodSandbox = %v, want an error naming the pod and saying %q", err, tc.wantErr)
				}
			}
			if got := len(ifaces.attached); got != map[bool]int{true: 1}[tc.attach] {
				t.Fatalf("%d attachments, want attach=%v", got, tc.attach)
			}
			if !tc.attach {
				return
			}
			a := ifaces.attached[0]
			want := podport.Attachment{
				Sandbox: "0123456789abcdef", PodNetns: "/proc/4242/ns/net", Node: testConfig.Node,
				Port: "east_default_web", Interface: "net1", IP: netip.MustParsePrefix("10.112.0.5/16"), MTU: 1400,
				Routes: []podport.Route{{Dst: netip.MustParsePrefix("10.113.0.0/16"), Via: netip.MustParseAddr("10.112.0.1")}},
			}
			if a.MAC.String() != "0a:58:0a:70:00:05" {
				t.Errorf("MAC = %s, want the annotation's", a.MAC)
			}
			a.MAC = nil
			if a.Sandbox != want.Sandbox || a.PodNetns != want.PodNetns || a.Port != want.Port || a.Interface != want.Interface ||
				a.IP != want.IP || a.MTU != want.MTU || len(a.Routes) != 1 || a.Routes[0] != want.Routes[0] || a.Node != want.Node {
				t.Errorf("attachment = %+v, want %+v", a, want)
			}
		})
	}
}

func TestStopAndRemoveDetachTheSandbox(t *testing.T) {
	ifaces := &fakeInterfaces{}
	p, err := New(testConfig, &fakePods{}, ifaces, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, sb := range []*api.PodSandbox{sandbox("default", nil, true), sandbox("default", nil, false), sandbox("kube-system", nil, true)} {
		if err := p.StopPodSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if err := p.RemovePodSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	p.detaching.Wait()
	// Only the pod with a network namespace of its own, outside the system namespaces,
	// had an interface to remove: twice, once per event.
	if len(ifaces.detached) != 2 || ifaces.detached[0] != "0123456789abcdef" {
		t.Fatalf("detached %v, want the first sandbox twice", ifaces.detached)
	}
}

func TestSynchronizeKeepsTheRunningSandboxes(t *testing.T) {
	for _, sweepErr := range []error{nil, errors.New("ovs-vsctl: database connection failed")} {
		running := sandbox("default", nil, true)
		ifaces := &fakeInterfaces{err: sweepErr, inPlace: map[string]bool{running.Id: true}}
		p, err := New(testConfig, &fakePods{}, ifaces, testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		// A failed sweep does not refuse the registration: new pods must still start.
		if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{running}, nil); err != nil {
			t.Fatalf("Synchronize: %v", err)
		}
		if len(ifaces.kept) != 1 || !ifaces.kept[running.Id] {
			t.Errorf("Sweep kept %v, want only the running sandbox %s", ifaces.kept, running.Id)
		}
	}
}

// TestSynchronizeAttachesPodsStartedWhileAway: of the running sandboxes a registration lists,
// the ones on the network without their interface get it (after Synchronize has returned);
// those that have it, system pods and opted-out pods are left alone.
func TestSynchronizeAttachesPodsStartedWhileAway(t *testing.T) {
	withNet1 := sandbox("default", nil, true)
	withNet1.Id = "has-net1"
	without := sandbox("default", nil, true)
	without.Id = "started-while-away"
	system := sandbox("kube-system", nil, true)
	system.Id = "system"
	optedOut := sandbox("default", map[string]string{podnet.OptOutAnnotation: "false"}, true)
	optedOut.Id = "opted-out"
	ifaces := &fakeInterfaces{inPlace: map[string]bool{withNet1.Id: true}}
	p, err := New(testConfig, &fakePods{versions: []*corev1.Pod{pod(withAddress("10.112.0.5"))}}, ifaces, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{withNet1, without, system, optedOut}, nil); err != nil {
		t.Fatal(err)
	}
	p.catchingUp.Wait()
	if len(ifaces.attached) != 1 || ifaces.attached[0].Sandbox != without.Id || ifaces.attached[0].IP.String() != "10.112.0.5/16" {
		t.Fatalf("attached %+v, want only %s with its address", ifaces.attached, without.Id)
	}
}

// TestSweepStoppedAsksForEveryStoppedSandbox: between registrations the plugin has no list of
// the runtime's sandboxes, so its periodic sweep passes none, and podport.Sweep removes the
// interfaces whose pod namespace went (a nil keep, not an empty one, which would remove all).
func TestSweepStoppedAsksForEveryStoppedSandbox(t *testing.T) {
	ifaces := &fakeInterfaces{kept: map[string]bool{}}
	p, err := New(testConfig, &fakePods{}, ifaces, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	p.SweepStopped(context.Background())
	if ifaces.sweeps != 1 || ifaces.kept != nil {
		t.Fatalf("%d sweeps keeping %v, want one keeping nil", ifaces.sweeps, ifaces.kept)
	}
}

func TestNetnsPathFallsBackToContainerdsPath(t *testing.T) {
	sb := sandbox("default", nil, true)
	sb.Pid = 0
	if got, ok := podNetns(sb); !ok || got != "/var/run/netns/cni-1" {
		t.Fatalf("podNetns = %q, %v; want containerd's path", got, ok)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	pool := testConfig
	pool.Routes = []netip.Prefix{netip.MustParsePrefix("10.112.0.0/12")}
	if _, err := New(pool, &fakePods{}, &fakeInterfaces{}, testr.New(t)); err != nil {
		t.Errorf("a route to the hub's whole pool, around the own block: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"route inside the own block", func(c *Config) { c.Routes = []netip.Prefix{netip.MustParsePrefix("10.112.128.0/17")} }, "inside"},
		{"route to the own block", func(c *Config) { c.Routes = []netip.Prefix{c.CIDR} }, "inside"},
		{"no cluster", func(c *Config) { c.ClusterID = "" }, "cluster ID"},
		{"no bridge", func(c *Config) { c.Node.Bridge = "" }, "bridge"},
		{"no block", func(c *Config) { c.CIDR = netip.Prefix{} }, "secondary CIDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig
			tc.change(&cfg)
			if _, err := New(cfg, &fakePods{}, &fakeInterfaces{}, testr.New(t)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
