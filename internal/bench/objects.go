package bench

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/workload"
)

const (
	// DefaultImage is Octopus's echo image (cmd/octopus-echo): the server (TCP echo and
	// discard) and, through `octopus-echo bench`, the load generator.
	DefaultImage = "ghcr.io/octopus-mcs/echo:latest"

	serverName = "bench-server"
	clientName = "bench-client"
	httpPort   = 8080
	// echoPort answers latency requests, discardPort swallows throughput streams: the ports
	// octopus-echo serves by default; the Service exposes them under the same numbers.
	echoPort    = 9000
	discardPort = 9001

	// managedByLabel marks everything bench creates, so leftovers of a killed run can be
	// found with `kubectl get ns -l app.kubernetes.io/managed-by=octopus-bench`.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "octopus-bench"
	appLabel       = "app.kubernetes.io/name"
)

// serviceName is the bench Service cluster id exports. Each cluster exports its own name:
// MCS merges same-named exports into one service, which the client's own cluster would then
// also answer.
func serviceName(clusterID string) string { return "bench-" + clusterID }

// port is the server port a kind of measurement uses.
func port(k Kind) uint16 {
	if k == KindThroughput {
		return discardPort
	}
	return echoPort
}

// objects are what bench creates in a cluster, namespace first: a server pod behind an
// exported Service and a client pod, both of image, kept on different nodes when the
// cluster has several, so that the in-cluster baseline crosses the network between nodes as
// cross-cluster traffic always does, and does not ride one node's bridge.
func objects(namespace, clusterID, image string) []client.Object {
	labels := map[string]string{managedByLabel: managedBy}
	pod := func(name, other string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{managedByLabel: managedBy, appLabel: name}},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
						Weight: 100,
						PodAffinityTerm: corev1.PodAffinityTerm{
							LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: other}},
							TopologyKey:   corev1.LabelHostname,
						},
					}},
				}},
				Containers: []corev1.Container{{
					// The image's default command is the echo server: the server pod serves,
					// the client pod idles in it until bench execs `octopus-echo bench`.
					Name: "echo", Image: image,
					Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: httpPort}, {Name: "echo", ContainerPort: echoPort}, {Name: "discard", ContainerPort: discardPort},
					},
					Env: []corev1.EnvVar{
						{Name: "CLUSTER_NAME", Value: clusterID},
						workload.FieldEnv("POD_NAME", "metadata.name"), workload.FieldEnv("POD_NAMESPACE", "metadata.namespace"),
						workload.FieldEnv("NODE_NAME", "spec.nodeName"), workload.FieldEnv("POD_IP", "status.podIP"),
					},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(httpPort)}},
						PeriodSeconds: 2,
					},
				}},
			},
		}
	}
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: labels}},
		pod(serverName, clientName),
		pod(clientName, serverName),
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: serviceName(clusterID), Namespace: namespace, Labels: labels},
			Spec: corev1.ServiceSpec{
				// Both families where the cluster has both, so that the ServiceImport gets a
				// ClusterSet IP of each and a dual-stack pair is measured in each
				// (workload.PairFamilies); one elsewhere.
				IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
				Selector:       map[string]string{appLabel: serverName},
				Ports: []corev1.ServicePort{
					{Name: "echo", Port: echoPort, TargetPort: intstr.FromInt32(echoPort)},
					{Name: "discard", Port: discardPort, TargetPort: intstr.FromInt32(discardPort)},
				},
			},
		},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: serviceName(clusterID), Namespace: namespace, Labels: labels}},
	}
}

// podServiceName is the headless Service through which a globalnet cluster exports its bench
// server, so that the pod gets a global IP of its own for the pod-to-pod measurement.
func podServiceName(clusterID string) string { return "bench-pod-" + clusterID }

// globalnetObjects are what bench adds in a globalnet cluster: the headless export of the
// server.
func globalnetObjects(namespace, clusterID string) []client.Object {
	return workload.HeadlessExport(namespace, podServiceName(clusterID), map[string]string{managedByLabel: managedBy},
		map[string]string{appLabel: serverName},
		corev1.ServicePort{Name: "echo", Port: echoPort, TargetPort: intstr.FromInt32(echoPort)},
		corev1.ServicePort{Name: "discard", Port: discardPort, TargetPort: intstr.FromInt32(discardPort)})
}
