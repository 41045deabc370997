package charts_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/config/monitoring"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/chartgen"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

var update = flag.Bool("update", false, "rewrite the golden renders in testdata/")

// namespaces are where each chart is installed.
var namespaces = map[string]string{charts.Hub: "octopus-hub", charts.Member: "octopus-system", charts.Operator: "octopus-operator"}

// TestGeneratedFilesAreCurrent fails when internal/manifests/render or config/rbac changed and the charts
// were not regenerated (make generate), so the charts never install other objects than join.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := chartgen.Files()
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range files {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v (run make generate)", err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s is stale; run make generate (-generated +committed):\n%s", p, diff)
		}
	}
}

// TestLint runs Helm's own linter (what `helm lint --strict` runs) on each chart.
func TestLint(t *testing.T) {
	for _, name := range charts.Names {
		t.Run(name, func(t *testing.T) {
			res := lint.RunAll(name, nil, namespaces[name])
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("%s", m)
				}
			}
		})
	}
}

// TestRender compares each chart's render with its golden file, with its default values and
// with values a user would set (testdata/values/).
func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name, chart string
		values      string
	}{
		{name: "hub", chart: charts.Hub},
		{name: "hub-gateway", chart: charts.Hub, values: "hub-gateway.yaml"},
		{name: "hub-interconnect", chart: charts.Hub, values: "hub-interconnect.yaml"},
		{name: "member", chart: charts.Member},
		{name: "member-custom", chart: charts.Member, values: "member-custom.yaml"},
		{name: "member-secondary", chart: charts.Member, values: "member-secondary.yaml"},
		{name: "operator", chart: charts.Operator},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var values map[string]any
			if tc.values != "" {
				data, err := os.ReadFile(filepath.Join("testdata", "values", tc.values))
				if err != nil {
					t.Fatal(err)
				}
				if err := yaml.Unmarshal(data, &values); err != nil {
					t.Fatal(err)
				}
			}
			got := renderAll(t, tc.chart, "v0.0.0-test", values)
			golden := filepath.Join("testdata", tc.name+".yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./charts -update writes it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("render of %s differs from %s (-want +got):\n%s", tc.chart, golden, diff)
			}
		})
	}
}

// renderAll renders chart name in its namespace as one stream, templates in name order.
func renderAll(t *testing.T, name, appVersion string, values map[string]any) string {
	t.Helper()
	c, err := charts.Load(name, appVersion)
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(c, namespaces[name], values)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range out {
			if !yield(k) {
				return
			}
		}
	}) {
		b.WriteString("# Source: " + k + "\n" + strings.TrimSpace(out[k]) + "\n")
	}
	return b.String()
}

// TestValuesAreChecked: values.schema.json refuses a value of the wrong type naming it, and the
// member chart refuses another namespace than the one the components look in.
func TestValuesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name, chart, namespace, values string
		want                           []string
	}{
		{name: "replicas as a string", chart: charts.Member, values: `controller: {replicas: "two"}`, want: []string{"/controller/replicas", "integer"}},
		{name: "unknown backend", chart: charts.Member, values: `gateway: {backend: ipsec}`, want: []string{"/gateway/backend"}},
		{name: "node selector as a list", chart: charts.Member, values: `gateway: {nodeSelector: [a]}`, want: []string{"/gateway/nodeSelector", "object"}},
		{name: "extra argument not a flag", chart: charts.Member, values: `gateway: {extraArgs: ["lease-duration 6s"]}`, want: []string{"/gateway/extraArgs/0"}},
		{name: "health port out of range", chart: charts.Member, values: `routeAgent: {healthPort: 70000}`, want: []string{"/routeAgent/healthPort"}},
		{name: "misspelt key", chart: charts.Member, values: `controler: {replicas: 1}`, want: []string{"controler"}},
		{name: "hub: misspelt key", chart: charts.Hub, values: `namespace: x`, want: []string{"namespace"}},
		{name: "hub: port as a string", chart: charts.Hub, values: `gateway: {listenPort: "4500"}`, want: []string{"/gateway/listenPort", "integer"}},
		{name: "hub: enabled as a string", chart: charts.Hub, values: `gateway: {enabled: "yes"}`, want: []string{"/gateway/enabled", "boolean"}},
		{name: "hub: gateway without a health-check address", chart: charts.Hub, values: `gateway: {enabled: true}`, want: []string{"/gateway/healthCheckIP"}},
		{name: "hub: interconnect without the databases' certificate", chart: charts.Hub, values: `interconnect: {enabled: true, tls: {caSecret: octopus-ic-ca}}`, want: []string{"interconnect.tls.dbSecret", "cannot issue", "octopus hub deploy --interconnect"}},
		{name: "hub: interconnect without the IC CA", chart: charts.Hub, values: `interconnect: {enabled: true, tls: {dbSecret: octopus-ic-db-tls}}`, want: []string{"interconnect.tls.caSecret", "cannot issue"}},
		{name: "hub: transit switch not a DNS label", chart: charts.Hub, values: `interconnect: {transitSwitches: [TS_1]}`, want: []string{"/interconnect/transitSwitches/0"}},
		{name: "hub: no transit switch", chart: charts.Hub, values: `interconnect: {transitSwitches: []}`, want: []string{"/interconnect/transitSwitches"}},
		{name: "hub: interconnect data directory relative", chart: charts.Hub, values: `interconnect: {dataDir: var/lib}`, want: []string{"/interconnect/dataDir"}},
		{name: "secondary network without a CIDR", chart: charts.Member, values: `secondaryNetwork: {enabled: true, clusterID: east}`, want: []string{"/secondaryNetwork", "cidr"}},
		{name: "secondary CIDR not a prefix", chart: charts.Member, values: `secondaryNetwork: {enabled: true, clusterID: east, cidr: east}`, want: []string{"/secondaryNetwork/cidr"}},
		{name: "unknown datapath", chart: charts.Member, values: `secondaryNetwork: {node: {datapath: dpdk}}`, want: []string{"/secondaryNetwork/node/datapath"}},
		{name: "gateway port interval not a duration", chart: charts.Member, values: `secondaryNetwork: {gatewayPort: {interval: 10}}`, want: []string{"/secondaryNetwork/gatewayPort/interval"}},
		{name: "NRI health port out of range", chart: charts.Member, values: `secondaryNetwork: {nri: {healthPort: 70000}}`, want: []string{"/secondaryNetwork/nri/healthPort"}},
		{name: "gateway port unknown key", chart: charts.Member, values: `secondaryNetwork: {gatewayPort: {nodeSelector: {}}}`, want: []string{"/secondaryNetwork/gatewayPort", "nodeSelector"}},
		{name: "netdev without an underlay", chart: charts.Member, values: `secondaryNetwork: {enabled: true, clusterID: east, cidr: 10.112.0.0/16, node: {datapath: netdev}}`, want: []string{"underlayInterface"}},
		{name: "member in another namespace", chart: charts.Member, namespace: "default", want: []string{"octopus-system", "default"}},
		{name: "operator in another namespace", chart: charts.Operator, namespace: "default", want: []string{"octopus-operator", "default"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var values map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &values); err != nil {
				t.Fatal(err)
			}
			c, err := charts.Load(tc.chart, "")
			if err != nil {
				t.Fatal(err)
			}
			ns := tc.namespace
			if ns == "" {
				ns = namespaces[tc.chart]
			}
			_, err = charts.Render(c, ns, values)
			if err == nil {
				t.Fatal("rendered; want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestInterconnectChartIsHubDeploys: the hub chart with interconnect enabled renders, object
// for object and field for field, what `octopus hub deploy --interconnect` applies
// (hub.InterconnectObjects) with the same image and transit switches, the Secrets named as
// hub deploy issues them; and nothing of it with interconnect off (the default).
func TestInterconnectChartIsHubDeploys(t *testing.T) {
	c, err := charts.Load(charts.Hub, "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	const file = "octopus-hub/templates/zz_generated.interconnect.yaml"
	off, err := charts.Render(c, namespaces[charts.Hub], nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(off[file]); got != "" {
		t.Errorf("interconnect off renders %s:\n%s", file, got)
	}
	for _, tc := range []struct {
		name   string
		values string
		cli    hub.InterconnectOptions
	}{
		{
			name:   "chart defaults, the CLI's image at the chart's version",
			values: `interconnect: {enabled: true, tls: {caSecret: octopus-ic-ca, dbSecret: octopus-ic-db-tls}}`,
			cli:    hub.InterconnectOptions{Image: "ghcr.io/octopus-mcs/octopus-ovn:v0.0.0-test"},
		},
		{
			name:   "testdata/values/hub-interconnect.yaml",
			values: mustRead(t, filepath.Join("testdata", "values", "hub-interconnect.yaml")),
			cli:    hub.InterconnectOptions{Image: "registry.example.org/octopus-ovn:v1.2.3", TransitSwitches: []string{"ts", "ts2"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var values map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &values); err != nil {
				t.Fatal(err)
			}
			out, err := charts.Render(c, namespaces[charts.Hub], values)
			if err != nil {
				t.Fatal(err)
			}
			want, err := hub.InterconnectObjects(namespaces[charts.Hub], tc.cli)
			if err != nil {
				t.Fatal(err)
			}
			docs := strings.Split(out[file], "\n---\n")
			var got []map[string]any
			for _, d := range docs {
				var m map[string]any
				if err := yaml.Unmarshal([]byte(d), &m); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				if m != nil {
					got = append(got, m)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("the chart renders %d objects, hub deploy applies %d", len(got), len(want))
			}
			for i, w := range want {
				// Both through JSON into maps: the chart's empty values (pull policy, priority
				// class, resources) render as nulls or empties that the API server reads
				// as the CLI's absent fields, so they are dropped before comparing.
				wm := toMap(t, w)
				gvk, err := apiutil.GVKForObject(w, kube.Scheme)
				if err != nil {
					t.Fatal(err)
				}
				wm["apiVersion"], wm["kind"] = gvk.GroupVersion().String(), gvk.Kind
				if diff := cmp.Diff(prune(wm), prune(got[i])); diff != "" {
					t.Errorf("%s %s: the chart differs from hub deploy (-hub deploy +chart):\n%s", gvk.Kind, w.GetName(), diff)
				}
			}
		})
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func toMap(t *testing.T, obj any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// prune drops what is empty (nil, "", empty maps and lists) and the typed objects' empty
// status and creationTimestamp, which mean "unset" to the API server either way.
func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if k == "status" || k == "creationTimestamp" {
				continue
			}
			if p := prune(e); p != nil {
				out[k] = p
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		var out []any
		for _, e := range x {
			out = append(out, prune(e))
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case string:
		if x == "" {
			return nil
		}
	case nil:
		return nil
	}
	return v
}

// TestMonitoring: the member chart ships config/monitoring's dashboard unchanged, and asking
// for a PrometheusRule where the cluster lacks its CRD fails saying so rather than failing at
// apply time.
func TestMonitoring(t *testing.T) {
	c, err := charts.Load(charts.Member, "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(c, namespaces[charts.Member], nil)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal([]byte(out["octopus-member/templates/monitoring.yaml"]), cm); err != nil {
		t.Fatal(err)
	}
	if cm.Name != "octopus-grafana-dashboard" || cm.Labels["grafana_dashboard"] != "1" || cm.Data["octopus.json"] != strings.TrimSpace(string(monitoring.Dashboard)) {
		t.Errorf("dashboard ConfigMap %s, labels %v: its octopus.json is not config/monitoring/dashboard.json", cm.Name, cm.Labels)
	}
	values := map[string]any{"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true}}}
	if _, err := charts.Render(c, namespaces[charts.Member], values); err == nil || !strings.Contains(err.Error(), "PrometheusRule CRD") {
		t.Errorf("PrometheusRule without its CRD: %v, want an error naming the CRD", err)
	}
}

// TestInterconnectCommands holds the member chart's octopus-ovn-ic pods to icconfig's command
// lines, which internal/manifests/render's TestMemberOVNICOverTLS runs on real daemons against
// the hub's TLS-only IC databases: ovn-ic's IC endpoints are ovn-ic-config's (ssl:, every
// host), its certificate the cluster's IC one, and the proxy's routes the cluster's own
// databases with the pod's certificate of the cluster's OVN CA.
func TestInterconnectCommands(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "values", "member-secondary.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	c, err := charts.Load(charts.Member, "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	out, err := charts.Render(c, namespaces[charts.Member], values)
	if err != nil {
		t.Fatal(err)
	}
	checkInterconnectCommands(t, out)

	// The values join sets (cluster.InterconnectValues) render the same pods.
	cfg := icconfig.Config{DBHosts: []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"}, NBPort: icconfig.DefaultNBPort, SBPort: icconfig.DefaultSBPort}
	sn := values["secondaryNetwork"].(map[string]any)
	sn["interconnect"] = cluster.InterconnectValues(cfg, "10.112.0.0/12")
	if out, err = charts.Render(c, namespaces[charts.Member], values); err != nil {
		t.Fatal(err)
	}
	checkInterconnectCommands(t, out)
}

func checkInterconnectCommands(t *testing.T, out map[string]string) {
	t.Helper()
	var d appsv1.Deployment
	if err := yaml.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(out["octopus-member/templates/ovn-ic.yaml"]), "---")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Name != "octopus-ovn-ic" || d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Fatalf("ovn-ic.yaml's first object: %s with %v replicas; want octopus-ovn-ic with 2 (active and standby)", d.Name, d.Spec.Replicas)
	}
	ns := namespaces[charts.Member]
	central := "ssl:octopus-ovn-central." + ns + ".svc:"
	want := map[string][]string{
		// No IC endpoints on ovn-ic's line: its supervisor reads them from the icmaster's file.
		"ovn-ic":   icconfig.SupervisorCommand(icconfig.TLSDir, icconfig.RunDir),
		"db-proxy": icconfig.ProxyCommand(central+"6641", central+"6642", icconfig.LocalTLSDir, icconfig.RunDir),
	}
	mounts := map[string]string{"ovn-ic": icconfig.TLSDir, "db-proxy": icconfig.LocalTLSDir}
	secrets := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	wantSecret := map[string]string{icconfig.TLSDir: cluster.InterconnectSecret, icconfig.LocalTLSDir: cluster.OVNInterconnectLocalSecret}
	seen := 0
	for _, ctr := range d.Spec.Template.Spec.Containers {
		w, ok := want[ctr.Name]
		if !ok {
			continue
		}
		seen++
		if got := append(slices.Clone(ctr.Command), ctr.Args...); !slices.Equal(got, w) {
			t.Errorf("container %s runs\n  %q\nwant icconfig's\n  %q", ctr.Name, got, w)
		}
		var mounted string
		for _, m := range ctr.VolumeMounts {
			if m.MountPath == mounts[ctr.Name] {
				mounted = secrets[m.Name]
			}
		}
		if mounted != wantSecret[mounts[ctr.Name]] {
			t.Errorf("container %s has Secret %q at %s; want %s", ctr.Name, mounted, mounts[ctr.Name], wantSecret[mounts[ctr.Name]])
		}
	}
	if seen != len(want) {
		t.Errorf("octopus-ovn-ic has %d of the containers %v", seen, slices.Sorted(maps.Keys(want)))
	}
	// The icmaster of each pod writes the file the supervisor of the same pod reads, in the
	// directory both mount.
	endpoints := "--endpoints-file=" + icconfig.EndpointsFile(icconfig.RunDir)
	icmasters := 0
	for _, ctr := range d.Spec.Template.Spec.Containers {
		if ctr.Name != "icmaster" {
			continue
		}
		icmasters++
		shared := slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == icconfig.RunDir })
		if !slices.Contains(ctr.Command, endpoints) || !shared {
			t.Errorf("the icmaster runs %q with mounts %v; want %s in the shared %s", ctr.Command, ctr.VolumeMounts, endpoints, icconfig.RunDir)
		}
	}
	// ovn-ic's liveness probe passes while the supervisor waits for the file.
	for _, ctr := range d.Spec.Template.Spec.Containers {
		if ctr.Name != "ovn-ic" {
			continue
		}
		if p := ctr.LivenessProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, icconfig.ProbeCommand(icconfig.RunDir)) {
			t.Errorf("ovn-ic's liveness probe %+v; want the command %q", p, icconfig.ProbeCommand(icconfig.RunDir))
		}
	}
	if icmasters != 1 {
		t.Errorf("octopus-ovn-ic has %d icmaster containers, want 1", icmasters)
	}
	// The ovnmaster leaves the block's gateway address to the interconnection router.
	var m appsv1.Deployment
	for doc := range strings.SplitSeq(out["octopus-member/templates/ovn.yaml"], "\n---\n") {
		if strings.Contains(doc, "name: octopus-ovnmaster\n") && strings.Contains(doc, "kind: Deployment") {
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(m.Spec.Template.Spec.Containers) == 0 || !slices.Contains(m.Spec.Template.Spec.Containers[0].Args, "--interconnect") {
		t.Errorf("the ovnmaster runs without --interconnect in an interconnected cluster (it would hold the router's address)")
	}
}

// TestGatewayPortPrivileges holds the member chart's gateway-port to its two modes: without
// gatewayPort.vpcs, NET_ADMIN alone and no database credential (cmd/octopus-ovn's
// TestGatewayPortNeedsOnlyNetAdmin runs it so); with it, the VPC gateways read from the SB
// with the node's ovn-controller certificate, never the NB, and the host's /run/netns shared
// back to the host, which only a privileged container may do.
func TestGatewayPortPrivileges(t *testing.T) {
	c, err := charts.Load(charts.Member, "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	for _, vpcs := range []bool{false, true} {
		t.Run(fmt.Sprintf("vpcs=%v", vpcs), func(t *testing.T) {
			out, err := charts.Render(c, namespaces[charts.Member], map[string]any{"secondaryNetwork": map[string]any{
				"enabled": true, "clusterID": "east", "cidr": "10.112.0.0/16", "gatewayPort": map[string]any{"vpcs": vpcs},
				"clusterCIDRs": []any{"10.1.0.0/16", "10.97.0.0/16"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			var ds appsv1.DaemonSet
			for doc := range strings.SplitSeq(out["octopus-member/templates/ovn.yaml"], "\n---\n") {
				if strings.Contains(doc, "name: octopus-ovn-gateway-port\n") && strings.Contains(doc, "kind: DaemonSet") {
					if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
						t.Fatal(err)
					}
				}
			}
			pod := ds.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("gateway-port DaemonSet with %d containers", len(pod.Containers))
			}
			ctr := pod.Containers[0]
			args := strings.Join(ctr.Args, " ")
			sc := ctr.SecurityContext
			privileged := sc != nil && sc.Privileged != nil && *sc.Privileged
			if strings.Contains(args, "--nb") {
				t.Errorf("gateway-port is given the NB database: %s", args)
			}
			secrets := map[string]bool{}
			for _, v := range pod.Volumes {
				if v.Secret != nil {
					secrets[v.Secret.SecretName] = true
				}
			}
			if !vpcs {
				if privileged || sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) ||
					strings.Contains(args, "--sb") || len(secrets) != 0 {
					t.Errorf("without VPCs: securityContext %+v, args %s, secrets %v; want NET_ADMIN alone and no database", sc, args, secrets)
				}
				return
			}
			if !privileged || !strings.Contains(args, "--sb=ssl:octopus-ovn-central.octopus-system.svc:6642") || !strings.Contains(args, "--vpc-netns-dir=/run/netns") ||
				!strings.Contains(args, "--cluster-cidr=10.1.0.0/16 --cluster-cidr=10.97.0.0/16") ||
				!secrets["octopus-ovn-controller-tls"] || len(secrets) != 1 {
				t.Errorf("with VPCs: privileged %v, args %s, secrets %v; want the SB with the controller's certificate", privileged, args, secrets)
			}
			var shared bool
			for _, m := range ctr.VolumeMounts {
				shared = shared || (m.MountPath == "/run/netns" && m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional)
			}
			if !shared || len(ctr.Env) != 1 || ctr.Env[0].Name != "NODE_NAME" || ctr.Env[0].ValueFrom == nil {
				t.Errorf("with VPCs: /run/netns shared %v, env %+v; want it shared back to the host and NODE_NAME the node's name", shared, ctr.Env)
			}
		})
	}
}
