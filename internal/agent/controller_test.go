package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/internal/hubaccess"
)

// TestRateLimits checks the client configurations the agent builds: client-go's default of
// 5 QPS throttled the agent's cold start (docs/benchmarks.md, "MCS scale"), so a zero limit
// must become the agent's default, and an explicit one must win.
func TestRateLimits(t *testing.T) {
	cred := hubaccess.Credential{ClusterID: "east", Server: "https://hub:6443", Namespace: "octopus", Token: "t"}
	for _, tc := range []struct {
		name                  string
		member                rest.Config
		o                     ControllerOptions
		memberQPS, hubQPS     float32
		memberBurst, hubBurst int
	}{
		{
			name:      "defaults",
			memberQPS: DefaultKubeAPIQPS, memberBurst: DefaultKubeAPIBurst,
			hubQPS: DefaultHubAPIQPS, hubBurst: DefaultHubAPIBurst,
		},
		{
			name:      "the member configuration's own limit is kept",
			member:    rest.Config{QPS: 100, Burst: 200},
			memberQPS: 100, memberBurst: 200,
			hubQPS: DefaultHubAPIQPS, hubBurst: DefaultHubAPIBurst,
		},
		{
			name:      "options win",
			member:    rest.Config{QPS: 100, Burst: 200},
			o:         ControllerOptions{MemberQPS: 7, MemberBurst: 9, HubQPS: 3, HubBurst: 4},
			memberQPS: 7, memberBurst: 9, hubQPS: 3, hubBurst: 4,
		},
		{
			name:      "a negative QPS turns the limit off and is kept",
			o:         ControllerOptions{MemberQPS: -1, HubQPS: -1},
			memberQPS: -1, memberBurst: DefaultKubeAPIBurst, hubQPS: -1, hubBurst: DefaultHubAPIBurst,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			member := tc.member
			member.Host = "https://member:6443"
			tc.o.Member = &member
			m := tc.o.MemberRESTConfig()
			if m.QPS != tc.memberQPS || m.Burst != tc.memberBurst {
				t.Errorf("member config: QPS %g, burst %d; want %g, %d", m.QPS, m.Burst, tc.memberQPS, tc.memberBurst)
			}
			if m.Host != member.Host {
				t.Errorf("member config: host %q, want %q", m.Host, member.Host)
			}
			if member.QPS != tc.member.QPS || member.Burst != tc.member.Burst {
				t.Errorf("the caller's member config was changed: QPS %g, burst %d", member.QPS, member.Burst)
			}
			h := tc.o.HubRESTConfig(hubaccess.NewLive(cred))
			if h.QPS != tc.hubQPS || h.Burst != tc.hubBurst {
				t.Errorf("hub config: QPS %g, burst %d; want %g, %d", h.QPS, h.Burst, tc.hubQPS, tc.hubBurst)
			}
			// The token is sent by the live credential's transport, not fixed in the config.
			if h.Host != cred.Server || h.BearerToken != "" || h.WrapTransport == nil {
				t.Errorf("hub config: host %q, token %q, wrapped %t; want the credential's host and its live token", h.Host, h.BearerToken, h.WrapTransport != nil)
			}
		})
	}
}

// TestManagerCacheStripsManagedFields checks that the member cache drops managedFields, which
// nothing in the agent reads, from every object it stores.
func TestManagerCacheStripsManagedFields(t *testing.T) {
	transform := ControllerOptions{}.managerOptions().Cache.DefaultTransform
	if transform == nil {
		t.Fatal("the manager's cache has no default transform")
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Labels: map[string]string{"app": "web"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
	}}
	got, err := transform(svc)
	if err != nil {
		t.Fatal(err)
	}
	obj := got.(*corev1.Service)
	if len(obj.ManagedFields) != 0 {
		t.Errorf("managedFields kept: %v", obj.ManagedFields)
	}
	if obj.Labels["app"] != "web" {
		t.Errorf("labels lost: %v", obj.Labels)
	}
}
