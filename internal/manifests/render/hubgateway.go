package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// HubGatewayName names the hub gateway's DaemonSet, its pods' app label and the ConfigMap of
// its environment. It runs as v1alpha1.HubGatewayServiceAccount, which Hub makes (the same
// identity a hub gateway outside the cluster gets a token of: hub.GatewayConfig).
const HubGatewayName = "octopus-hub-gateway"

// HubGatewayOptions configure HubGateway.
type HubGatewayOptions struct {
	// Namespace is the hub namespace. Optional: v1alpha1.DefaultHubNamespace.
	Namespace string
	// Image is the project's image (make image), which holds octopus-agent. Required.
	Image      string
	PullPolicy corev1.PullPolicy
	// Backend is the tunnel driver; the members' gateways must use the same. Required.
	Backend v1alpha1.Backend
	// ListenPort is the tunnel's UDP port and MetricsPort the /metrics port, both on the
	// node's network. Required.
	ListenPort, MetricsPort int32
	// HealthCheckIP is the address the members probe the hub's gateway at: one in no
	// cluster's pod or service CIDR. Required: the hub has no pod CIDR of its own in the
	// cluster set.
	HealthCheckIP string
	// NodeSelector picks the nodes that may run the hub's gateway; one of them is active.
	NodeSelector      map[string]string
	Tolerations       []corev1.Toleration
	PriorityClassName string
	Resources         corev1.ResourceRequirements
	// Config is the gateway's environment: OCTOPUS_<FLAG> sets a flag of `octopus-agent
	// gateway` (e.g. OCTOPUS_LEASE_DURATION), as in the member chart.
	Config map[string]string
}

// HubGateway renders the hub's gateway for the hub topology (clusters joined with --topology
// hub tunnel to it only, and it forwards between them): a DaemonSet of `octopus-agent gateway
// --hub` on the selected nodes of the hub cluster, in the node's network namespace like a
// member's gateway, and the ConfigMap of its environment. The pods authenticate with their
// own ServiceAccount token, and tunnel from their node's address (status.hostIP): its
// ServiceAccount may not read Nodes (hubGatewayIdentity).
func HubGateway(o HubGatewayOptions) ([]client.Object, error) {
	if o.Image == "" || o.Backend == "" || o.ListenPort == 0 || o.MetricsPort == 0 || o.HealthCheckIP == "" {
		return nil, errors.New("rendering the hub's gateway: the image, backend, listen and metrics ports and health-check address are required")
	}
	if o.Namespace == "" {
		o.Namespace = v1alpha1.DefaultHubNamespace
	}
	config, err := json.Marshal(o.Config)
	if err != nil {
		return nil, fmt.Errorf("encoding the hub gateway's environment: %w", err)
	}
	sum := sha256.Sum256(config)
	meta := metav1.ObjectMeta{Name: HubGatewayName, Namespace: o.Namespace, Labels: kube.ManagedLabels()}
	ds := hubGatewayDaemonSet(o, meta, hex.EncodeToString(sum[:]))
	return []client.Object{&corev1.ConfigMap{ObjectMeta: meta, Data: o.Config}, ds}, nil
}

// hubGatewayDaemonSet is the DaemonSet of HubGateway, its pods rolled when configSum (of the
// ConfigMap's data) changes. o.Namespace is set.
func hubGatewayDaemonSet(o HubGatewayOptions, meta metav1.ObjectMeta, configSum string) *appsv1.DaemonSet {
	app := map[string]string{"app.kubernetes.io/name": HubGatewayName}
	hostPathType := corev1.HostPathCharDev
	return &appsv1.DaemonSet{
		ObjectMeta: meta,
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: app},
			// One gateway down at a time: the others hold or take the active role.
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: app,
					// A changed environment rolls the pods, as in the member chart.
					Annotations: map[string]string{"checksum/config": configSum},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName: v1alpha1.HubGatewayServiceAccount,
					PriorityClassName:  o.PriorityClassName,
					// The tunnel's endpoint is the node's address; the tunnel device and the
					// routes between the members are the node's.
					HostNetwork:  true,
					DNSPolicy:    corev1.DNSClusterFirstWithHostNet,
					NodeSelector: o.NodeSelector,
					Tolerations:  o.Tolerations,
					Containers:   []corev1.Container{hubGatewayContainer(o)},
					// wireguard-go's device.
					Volumes: []corev1.Volume{{Name: "tun", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: "/dev/net/tun", Type: &hostPathType},
					}}},
				},
			},
		},
	}
}

// hubGatewayContainer is the one container of the hub gateway's pods: `octopus-agent gateway
// --hub`, its flags from o and its environment from the ConfigMap. o.Namespace is set.
func hubGatewayContainer(o HubGatewayOptions) corev1.Container {
	fromField := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return corev1.Container{
		Name:            "gateway",
		Image:           o.Image,
		ImagePullPolicy: o.PullPolicy,
		Command:         []string{"octopus-agent", "gateway"},
		Args: []string{
			"--hub", "--hub-namespace=" + o.Namespace,
			"--backend=" + string(o.Backend),
			fmt.Sprintf("--listen-port=%d", o.ListenPort),
			fmt.Sprintf("--metrics-bind-address=:%d", o.MetricsPort),
			"--endpoint-ip=$(HOST_IP)",
			"--health-check-ip=" + o.HealthCheckIP,
		},
		Env: []corev1.EnvVar{fromField("NODE_NAME", "spec.nodeName"), fromField("HOST_IP", "status.hostIP")},
		EnvFrom: []corev1.EnvFromSource{{
			ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: HubGatewayName}},
		}},
		Ports: []corev1.ContainerPort{
			{Name: "tunnel", ContainerPort: o.ListenPort, Protocol: corev1.ProtocolUDP},
			{Name: "metrics", ContainerPort: o.MetricsPort, Protocol: corev1.ProtocolTCP},
		},
		// Standbys serve /metrics too: this says the process is alive, whatever its role.
		LivenessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/metrics", Port: intstr.FromString("metrics")}},
			PeriodSeconds: 10,
		},
		// Ready once it can take the active role over at once: the rolling update
		// (one node at a time) waits for it before it stops the next old pod.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("metrics")}},
			PeriodSeconds: 1,
		},
		Resources: o.Resources,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities: &corev1.Capabilities{
				// NET_ADMIN: tunnel device, routes; NET_RAW: the ICMP health probes.
				Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
				Drop: []corev1.Capability{"ALL"},
			},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "tun", MountPath: "/dev/net/tun"}},
	}
}
