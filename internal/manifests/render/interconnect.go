package render

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/pki"
)

// The interconnection databases on the hub (issue 32, docs/secondary-network.md
// "Interconnection databases on the hub"): IC NB and IC SB, each a raft cluster of
// ICDBReplicas ovsdb-servers, one member of each per pod of the StatefulSet ICDBName.
const (
	// ICDBName names the StatefulSet, its pods' app label and the headless Service that
	// gives each member the DNS name its raft peers reach it by.
	ICDBName = "octopus-ic-db"
	// ICDBReplicas is the size of both raft clusters: three members survive the loss of
	// any one (raft needs a majority), and more would slow every commit on a hub that is
	// not there to carry load.
	ICDBReplicas = 3
	// ICCASecret holds the interconnection CA, made by hub deploy and mounted by no pod;
	// ICDBSecret the databases' own certificate, which serves their clients and their raft
	// peers (both ends of a raft connection present it). Each member cluster's ovn-ic has a
	// client certificate of its own from the same CA.
	ICCASecret = "octopus-ic-ca"
	ICDBSecret = "octopus-ic-db-tls"
	// The ports on the hub nodes' addresses: the clients' ports are Kube-OVN's (ic-nb-port,
	// ic-sb-port), so an ovn-ic-config written for Kube-OVN keeps working, and the raft
	// ports are the two after them, as in Kube-OVN's ovn-ic-db.
	ICNBPort     = 6645
	ICSBPort     = 6646
	ICNBRaftPort = 6647
	ICSBRaftPort = 6648
	// DefaultTransitSwitch is the transit switch made at deploy, Kube-OVN's name (ts): every
	// AZ's ovn-ic copies it into its own NB, and the AZs' routers join it.
	DefaultTransitSwitch = "ts"
	// icTLSDir is where the pods mount ICDBSecret.
	icTLSDir = "/etc/ovn/tls"
)

// ICDatabase is one of the two interconnection databases as the pods run it.
type ICDatabase struct {
	// Name is the container's name and the database file's stem.
	Name string
	// DBName is the OVSDB database name in the schema, which ovsdb-tool join-cluster and
	// ovs-appctl cluster/status take.
	DBName string
	// Schema is the schema file in the image (Debian's ovn-ic-db).
	Schema string
	// Port serves the clients, RaftPort the other members.
	Port, RaftPort int32
	// Ctl is the database's command-line client, which makes the transit switches.
	Ctl string
}

// ICDatabases are IC NB and IC SB.
var ICDatabases = []ICDatabase{
	{Name: "ic-nb", DBName: "OVN_IC_Northbound", Schema: "/usr/share/ovn/ovn-ic-nb.ovsschema", Port: ICNBPort, RaftPort: ICNBRaftPort, Ctl: "ovn-ic-nbctl"},
	{Name: "ic-sb", DBName: "OVN_IC_Southbound", Schema: "/usr/share/ovn/ovn-ic-sb.ovsschema", Port: ICSBPort, RaftPort: ICSBRaftPort, Ctl: "ovn-ic-sbctl"},
}

// ICDBScript is what each database's container runs, as `sh -c`. It reads the environment
// (ICDBEnv says what each variable holds), so that the test that runs it on real daemons
// (interconnect_daemons_test.go) runs exactly what the pods run, with loopback addresses
// where the pods have DNS names:
//
//   - the first start of member 0 creates the raft cluster, the others' join it through
//     member 0 (RAFT_SEED); a member that has its file restarts from it (a restart must not
//     make a new cluster or a second identity for the same address);
//   - the server listens on SSL only (LISTEN, a pssl remote) with the certificate of
//     ICDBSecret and its CA as the only trust: OVS's SSL always demands the client's
//     certificate, so a client without one, or with another CA's, is refused; raft runs on
//     SSL too (RAFT_SELF is an ssl: address), with the same certificate on both ends. The
//     unix socket, in the pod's own directory, serves the container's tools only;
//   - for IC NB, TRANSIT_SWITCHES are made once the server answers (--may-exist; the name is
//     the table's index, so three members doing it at once make one row; writes through a
//     follower are forwarded to the leader). It runs in the background of the server, which
//     replaces the shell and so keeps the container's PID.
const ICDBScript = `set -eu
mkdir -p "$DB_DIR"
db="$DB_DIR/$DB_STEM.db"
sock="$DB_DIR/$DB_STEM.sock"
if [ ! -s "$db" ]; then
  rm -f "$db"
  if [ "${POD_NAME##*-}" = 0 ]; then
    ovsdb-tool create-cluster "$db" "$SCHEMA" "$RAFT_SELF"
  else
    ovsdb-tool join-cluster "$db" "$DB_NAME" "$RAFT_SELF" "$RAFT_SEED"
  fi
fi
if [ -n "${TRANSIT_SWITCHES:-}" ]; then
  (
    for ts in $(echo "$TRANSIT_SWITCHES" | tr , ' '); do
      until "$DB_CTL" --db="unix:$sock" --no-leader-only --timeout=5 --may-exist ts-add "$ts" >/dev/null 2>&1; do
        sleep 1
      done
    done
  ) &
fi
exec ovsdb-server "$db" \
  --remote="$LISTEN" --remote="punix:$sock" \
  --private-key="$TLS_DIR/tls.key" --certificate="$TLS_DIR/tls.crt" --ca-cert="$TLS_DIR/ca.crt" \
  --unixctl="$DB_DIR/$DB_STEM.ctl" --pidfile="$DB_DIR/$DB_STEM.pid" --log-file="$DB_DIR/$DB_STEM.log" \
  --no-chdir -vconsole:info -vfile:off
`

// ICDBEnv is the environment of ICDBScript for one database: pod names the member (its
// ordinal is the name's last dash-separated field, as a StatefulSet's pods are named),
// self its raft address, seed member 0's, listen the clients' pssl remote, dir the member's
// files, tlsDir where tls.key, tls.crt and ca.crt are, transitSwitches the switches to make
// (IC NB only).
func ICDBEnv(db ICDatabase, pod, self, seed, listen, dir, tlsDir string, transitSwitches []string) map[string]string {
	env := map[string]string{
		"POD_NAME": pod, "DB_DIR": dir, "DB_STEM": db.Name, "DB_NAME": db.DBName, "DB_CTL": db.Ctl,
		"SCHEMA": db.Schema, "RAFT_SELF": self, "RAFT_SEED": seed, "LISTEN": listen, "TLS_DIR": tlsDir,
	}
	if db.Name == "ic-nb" && len(transitSwitches) > 0 {
		env["TRANSIT_SWITCHES"] = strings.Join(transitSwitches, ",")
	}
	return env
}

// InterconnectOptions configure Interconnect.
type InterconnectOptions struct {
	// Namespace is the hub namespace. Optional: v1alpha1.DefaultHubNamespace.
	Namespace string
	// Image holds Open vSwitch's ovsdb-server and OVN's IC schemas and ctl tools (the
	// secondary network's image). Required.
	Image      string
	PullPolicy corev1.PullPolicy
	// TransitSwitches are made at deploy. Optional: DefaultTransitSwitch.
	TransitSwitches []string
	// DataDir is the host directory of the members' database files: a member that moves
	// to another node starts afresh there, which raft tolerates for one member at a time.
	// Optional: /var/lib/octopus/ic-db.
	DataDir string
	// ClusterDomain is the hub cluster's DNS domain, in the members' raft addresses.
	// Optional: cluster.local.
	ClusterDomain     string
	NodeSelector      map[string]string
	Tolerations       []corev1.Toleration
	PriorityClassName string
	Resources         corev1.ResourceRequirements
	// DBSecret holds the databases' certificate (tls.crt, tls.key, ca.crt; ICDBLeaf) and
	// CASecret the IC CA (tls.crt, tls.key) the signer signs the members' certificates with.
	// Optional: ICDBSecret and ICCASecret, which hub deploy issues; the hub chart names the
	// Secrets its user made, since a chart cannot issue them (docs/secondary-network.md).
	DBSecret, CASecret string
}

func (o *InterconnectOptions) defaults() {
	if o.DBSecret == "" {
		o.DBSecret = ICDBSecret
	}
	if o.CASecret == "" {
		o.CASecret = ICCASecret
	}
	if o.Namespace == "" {
		o.Namespace = v1alpha1.DefaultHubNamespace
	}
	if len(o.TransitSwitches) == 0 {
		o.TransitSwitches = []string{DefaultTransitSwitch}
	}
	if o.DataDir == "" {
		o.DataDir = "/var/lib/octopus/ic-db"
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = "cluster.local"
	}
}

// Interconnect renders the interconnection databases on the hub: a headless Service that
// names each member for raft, and a StatefulSet of ICDBReplicas pods, each running one member
// of IC NB and one of IC SB (ICDBScript) in the node's network, on distinct nodes. The
// member clusters' ovn-ic reach them at the hub nodes' addresses (their ovn-ic-config's
// ic-db-host, a comma list, with ICNBPort and ICSBPort), so that losing a node loses one
// address of the list, not the only one. The pods mount ICDBSecret, which hub deploy issues
// (hub.EnsureInterconnectCertificates) before it applies these.
func Interconnect(o InterconnectOptions) ([]client.Object, error) {
	if o.Image == "" {
		return nil, errors.New("rendering the interconnection databases: the image (the secondary network's, with ovsdb-server and OVN's IC schemas) is required")
	}
	o.defaults()
	for _, ts := range o.TransitSwitches {
		if !validLabel(ts) {
			return nil, fmt.Errorf("rendering the interconnection databases: transit switch %q must be a DNS label (lower-case letters, digits, '-')", ts)
		}
	}
	labels := kube.ManagedLabels()
	app := map[string]string{"app.kubernetes.io/name": ICDBName}
	for k, v := range app {
		labels[k] = v
	}
	meta := metav1.ObjectMeta{Name: ICDBName, Namespace: o.Namespace, Labels: labels}
	var ports []corev1.ServicePort
	var containers []corev1.Container
	for _, db := range ICDatabases {
		ports = append(ports,
			// The target port spelt out: unset, it would render as 0 (an IntOrString is never
			// omitted), which only the API server's defaulting corrects.
			corev1.ServicePort{Name: db.Name, Port: db.Port, TargetPort: intstr.FromInt32(db.Port)},
			corev1.ServicePort{Name: db.Name + "-raft", Port: db.RaftPort, TargetPort: intstr.FromInt32(db.RaftPort)})
		containers = append(containers, icDBContainer(o, db))
	}
	svc := &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  app,
			Ports:     ports,
			// A member is ready only once it has joined; its peers must find it before.
			PublishNotReadyAddresses: true,
		},
	}
	hostPathType := corev1.HostPathDirectoryOrCreate
	sts := &appsv1.StatefulSet{
		ObjectMeta: meta,
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(int32(ICDBReplicas)),
			ServiceName: ICDBName,
			Selector:    &metav1.LabelSelector{MatchLabels: app},
			// All at once: members 1 and 2 join through member 0 and wait for it, and a
			// raft cluster needs two members up before it serves anything.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: app},
				Spec: corev1.PodSpec{
					// The member clusters reach the databases at the nodes' addresses.
					HostNetwork:       true,
					DNSPolicy:         corev1.DNSClusterFirstWithHostNet,
					PriorityClassName: o.PriorityClassName,
					NodeSelector:      o.NodeSelector,
					Tolerations:       o.Tolerations,
					// One member per node: two on one node would fall together, and would
					// want the same host ports.
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: app},
							TopologyKey:   corev1.LabelHostname,
						}},
					}},
					AutomountServiceAccountToken: ptr.To(false),
					Containers:                   containers,
					Volumes: []corev1.Volume{
						{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: o.DataDir, Type: &hostPathType}}},
						{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: o.DBSecret, DefaultMode: ptr.To(int32(0o400))}}},
					},
				},
			},
		},
	}
	signer, err := icSigner(o, labels)
	if err != nil {
		return nil, err
	}
	return append([]client.Object{svc, sts}, signer...), nil
}

// ICSignerName names the signer's Deployment, ServiceAccount and RoleBinding.
const ICSignerName = "octopus-ic-signer"

// icSigner is `octopus-ovn ic-signer` on the hub: one replica (a signature is one write, guarded
// by the resourceVersion it read), its ServiceAccount bound to its generated Role in the hub
// namespace, and the CA Secret mounted; the only pod that holds the CA's key.
func icSigner(o InterconnectOptions, labels map[string]string) ([]client.Object, error) {
	roles, err := rbac.Load(rbac.ICSigner)
	if err != nil {
		return nil, err
	}
	if len(roles.Roles) != 1 || roles.ClusterRole != nil {
		return nil, fmt.Errorf("the ic-signer's generated RBAC: want one Role and no ClusterRole, have %d and %v", len(roles.Roles), roles.ClusterRole != nil)
	}
	role := roles.Roles[0].DeepCopy()
	role.Namespace, role.Labels = o.Namespace, labels
	meta := metav1.ObjectMeta{Name: ICSignerName, Namespace: o.Namespace, Labels: labels}
	app := map[string]string{"app.kubernetes.io/name": ICSignerName}
	const caDir = "/etc/octopus/ic-ca"
	return []client.Object{
		role,
		&corev1.ServiceAccount{ObjectMeta: meta},
		&rbacv1.RoleBinding{ObjectMeta: meta,
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ICSignerName, Namespace: o.Namespace}}},
		&appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: app},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: app},
				Spec: corev1.PodSpec{
					ServiceAccountName: ICSignerName,
					PriorityClassName:  o.PriorityClassName,
					NodeSelector:       o.NodeSelector,
					Tolerations:        o.Tolerations,
					Containers: []corev1.Container{{
						Name: "ic-signer", Image: o.Image, ImagePullPolicy: o.PullPolicy,
						Command: []string{"octopus-ovn", "ic-signer", "--namespace=" + o.Namespace,
							"--ca-cert=" + caDir + "/tls.crt", "--ca-key=" + caDir + "/tls.key"},
						Resources: o.Resources,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "ca", MountPath: caDir, ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: o.CASecret, DefaultMode: ptr.To(int32(0o440))}}}},
					SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To(int64(65532))},
				},
			},
		}},
	}, nil
}

// icDBContainer runs one database's member. o has its defaults.
func icDBContainer(o InterconnectOptions, db ICDatabase) corev1.Container {
	member := func(pod string) string {
		return fmt.Sprintf("ssl:%s.%s.%s.svc.%s:%d", pod, ICDBName, o.Namespace, o.ClusterDomain, db.RaftPort)
	}
	// The pod's own name comes from the downward API; Kubernetes expands $(POD_NAME) in
	// the values after it.
	env := ICDBEnv(db, "$(POD_NAME)", member("$(POD_NAME)"), member(ICDBName+"-0"),
		"pssl:"+strconv.Itoa(int(db.Port)), "/var/lib/ovn-ic/"+db.Name, icTLSDir, o.TransitSwitches)
	vars := []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	for _, k := range sortedKeys(env) {
		if k != "POD_NAME" {
			vars = append(vars, corev1.EnvVar{Name: k, Value: env[k]})
		}
	}
	status := []string{"ovs-appctl", "-t", "/var/lib/ovn-ic/" + db.Name + "/" + db.Name + ".ctl", "cluster/status", db.DBName}
	return corev1.Container{
		Name:            db.Name,
		Image:           o.Image,
		ImagePullPolicy: o.PullPolicy,
		Command:         []string{"sh", "-c", ICDBScript},
		Env:             vars,
		Ports: []corev1.ContainerPort{
			{Name: db.Name, ContainerPort: db.Port, HostPort: db.Port},
			{Name: db.Name + "-raft", ContainerPort: db.RaftPort, HostPort: db.RaftPort},
		},
		// Ready while the member is in the cluster (a leader or a follower that has one):
		// cluster/status answers only from a live server.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: status}},
			PeriodSeconds: 10, TimeoutSeconds: 5,
		},
		Resources: o.Resources,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: "/var/lib/ovn-ic/" + db.Name, SubPath: db.Name},
			{Name: "tls", MountPath: icTLSDir, ReadOnly: true},
		},
	}
}

// validLabel says whether s is an RFC 1123 label.
func validLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// sortedKeys are m's keys in order, so that rendering twice gives the same objects.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ICDBLeaf is the interconnection databases' certificate (Secret ICDBSecret): a server
// certificate for their clients and a client one too, because every raft member connects to
// the others with it. OVS checks only the CA, not names; the names are for Go clients (the
// icmaster's overlap check), which reach the databases at the hub nodes' addresses: ips.
func ICDBLeaf(namespace string, ips []netip.Addr) pki.Leaf {
	svc := ICDBName + "." + namespace + ".svc"
	return pki.Leaf{CommonName: ICDBName, Server: true, Client: true,
		DNSNames: []string{ICDBName, svc, "*." + svc, "*." + svc + ".cluster.local", "localhost"},
		IPs:      ips}
}
