package nriplugin

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

// observation is a histogram series' count and sum.
type observation struct {
	count uint64
	sum   float64
}

// observed gathers m's series, keyed `name{label="value",…}` (labels sorted by name).
func observed(t *testing.T, m *metrics) map[string]observation {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]observation{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			h := s.GetHistogram()
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = observation{h.GetSampleCount(), h.GetSampleSum()}
		}
	}
	return got
}

const (
	hookAttached  = `octopus_nri_run_pod_sandbox_seconds{outcome="attached"}`
	hookRefused   = `octopus_nri_run_pod_sandbox_seconds{outcome="refused"}`
	waitAttached  = `octopus_nri_run_pod_sandbox_step_seconds{outcome="attached",step="address_wait"}`
	waitRefused   = `octopus_nri_run_pod_sandbox_step_seconds{outcome="refused",step="address_wait"}`
	attachOK      = `octopus_nri_run_pod_sandbox_step_seconds{outcome="attached",step="attach"}`
	attachRefused = `octopus_nri_run_pod_sandbox_step_seconds{outcome="refused",step="attach"}`
)

// TestRunPodSandboxMetrics: each RunPodSandbox call for a pod on the network is one
// observation of the hook, labelled with its outcome, and one of each step it got to, so that
// a slow start says whether the address or the attachment took the time; the calls for other
// pods, which return at once, are not observed.
func TestRunPodSandboxMetrics(t *testing.T) {
	addressed := pod(withAddress("10.112.0.5"))
	for _, tc := range []struct {
		name      string
		sandbox   *api.PodSandbox
		pods      *fakePods
		attachErr error
		want      map[string]uint64 // series → count
	}{
		{name: "attached", sandbox: sandbox("default", nil, true), pods: &fakePods{versions: []*corev1.Pod{addressed}},
			want: map[string]uint64{hookAttached: 1, waitAttached: 1, attachOK: 1}},
		{name: "refused by the ovnmaster: no attach step", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{pod(map[string]string{podnet.ErrorAnnotation: "block exhausted"})}},
			want: map[string]uint64{hookRefused: 1, waitRefused: 1}},
		{name: "no address in time", sandbox: sandbox("default", nil, true), pods: &fakePods{versions: []*corev1.Pod{pod(nil)}},
			want: map[string]uint64{hookRefused: 1, waitRefused: 1}},
		{name: "refused by OVS", sandbox: sandbox("default", nil, true), pods: &fakePods{versions: []*corev1.Pod{addressed}},
			attachErr: errors.New("ovs-vsctl: no bridge br-int"), want: map[string]uint64{hookRefused: 1, waitRefused: 1, attachRefused: 1}},
		{name: "host network", sandbox: sandbox("default", nil, false), pods: &fakePods{}, want: map[string]uint64{}},
		{name: "system namespace", sandbox: sandbox("kube-system", nil, true), pods: &fakePods{}, want: map[string]uint64{}},
		{name: "opted out on the pod since", sandbox: sandbox("default", nil, true),
			pods: &fakePods{versions: []*corev1.Pod{pod(map[string]string{podnet.OptOutAnnotation: "false"})}}, want: map[string]uint64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(testConfig, tc.pods, &fakeInterfaces{err: tc.attachErr}, testr.New(t))
			if err != nil {
				t.Fatal(err)
			}
			_ = p.RunPodSandbox(context.Background(), tc.sandbox)
			got := observed(t, p.metrics)
			counts := map[string]uint64{}
			for k, o := range got {
				counts[k] = o.count
			}
			if !maps.Equal(counts, tc.want) {
				t.Fatalf("observations %v, want %v", counts, tc.want)
			}
			// The hook's time covers its steps': they are measured, not merely counted.
			for _, outcome := range []string{"attached", "refused"} {
				hook := got[`octopus_nri_run_pod_sandbox_seconds{outcome="`+outcome+`"}`].sum
				steps := got[`octopus_nri_run_pod_sandbox_step_seconds{outcome="`+outcome+`",step="address_wait"}`].sum +
					got[`octopus_nri_run_pod_sandbox_step_seconds{outcome="`+outcome+`",step="attach"}`].sum
				if hook < steps {
					t.Errorf("%s: the hook took %gs, less than its steps' %gs", outcome, hook, steps)
				}
			}
		})
	}
}

// TestAddressWaitIsMeasured: a pod refused for want of an address waited the whole
// AddressWait, and the address_wait step says so.
func TestAddressWaitIsMeasured(t *testing.T) {
	p, err := New(testConfig, &fakePods{versions: []*corev1.Pod{pod(nil)}}, &fakeInterfaces{}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RunPodSandbox(context.Background(), sandbox("default", nil, true)); err == nil {
		t.Fatal("RunPodSandbox gave net1 without an address")
	}
	if got := observed(t, p.metrics)[waitRefused].sum; got < testConfig.AddressWait.Seconds() {
		t.Fatalf("address_wait observed %gs, want at least the %s waited", got, testConfig.AddressWait)
	}
}

// TestCatchUpIsNotObserved: the attachments after a registration (Synchronize) delay no pod's
// start, so they stay out of the hook's distribution.
func TestCatchUpIsNotObserved(t *testing.T) {
	ifaces := &fakeInterfaces{inPlace: map[string]bool{}}
	p, err := New(testConfig, &fakePods{versions: []*corev1.Pod{pod(withAddress("10.112.0.5"))}}, ifaces, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{sandbox("default", nil, true)}, nil); err != nil {
		t.Fatal(err)
	}
	p.catchingUp.Wait()
	if len(ifaces.attached) != 1 {
		t.Fatalf("the catch-up attached %d sandboxes, want 1", len(ifaces.attached))
	}
	if got := observed(t, p.metrics); len(got) != 0 {
		t.Fatalf("the catch-up was observed: %v", got)
	}
}

// count is the number of RunPodSandbox calls m observed with outcome.
func (m *metrics) count(t *testing.T, outcome string) uint64 {
	t.Helper()
	return observed(t, m)[`octopus_nri_run_pod_sandbox_seconds{outcome="`+outcome+`"}`].count
}
