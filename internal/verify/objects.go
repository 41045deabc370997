package verify

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
	// DefaultServerImage is Octopus's echo server: HTTP on 8080 answering with its
	// cluster, node and pod, TCP and UDP echo on 9000.
	DefaultServerImage = "ghcr.io/octopus-mcs/echo:latest"
	// DefaultClientImage has curl and dig. Pinned, so a new netshoot release cannot change
	// the tools the checks run.
	DefaultClientImage = "nicolaka/netshoot:v0.13"

	serverName = "probe-server"
	clientName = "probe-client"
	httpPort   = 8080
	// servicePort is the probe Service's HTTP port, the one requests by ClusterSet IP and
	// by name use.
	servicePort = 80
	// servicePortName names the probe Service's port, and so the port of its imported
	// EndpointSlices.
	servicePortName = "http"

	// managedByLabel marks everything verify creates, so leftovers of a killed run can be
	// found with `kubectl get ns -l app.kubernetes.io/managed-by=octopus-verify`.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "octopus-verify"
	appLabel       = "app.kubernetes.io/name"
)

// serviceName is the probe Service cluster id exports. Each cluster exports its own name:
// MCS merges same-named exports of all clusters into one service, and then a request could
// be answered by the client's own cluster.
func serviceName(clusterID string) string { return "probe-" + clusterID }

// objects are what verify creates in a cluster, namespace first.
func objects(namespace, clusterID, serverImage, clientImage string) []client.Object {
	labels := map[string]string{managedByLabel: managedBy}
	serverLabels := map[string]string{managedByLabel: managedBy, appLabel: serverName}
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: labels}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: serverName, Namespace: namespace, Labels: serverLabels},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{
					Name: "echo", Image: serverImage,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort}, {Name: "tcp", ContainerPort: 9000}},
					Env: []corev1.EnvVar{
						// The answer names the cluster, which proves it came from this one.
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
		},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: clientName, Namespace: namespace, Labels: labels},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{
					// netshoot's default command is an interactive shell, which exits at once
					// without a terminal; the checks exec into the pod instead.
					Name: "client", Image: clientImage, Command: []string{"sleep", "infinity"},
				}},
			},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: serviceName(clusterID), Namespace: namespace, Labels: labels},
			Spec: corev1.ServiceSpec{
				// Both families where the cluster has both, so that a dual-stack pair is
				// checked in each (workload.PairFamilies); one elsewhere.
				IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
				Selector:       map[string]string{appLabel: serverName},
				Ports: []corev1.ServicePort{
					{Name: servicePortName, Port: servicePort, TargetPort: intstr.FromInt32(httpPort)},
				},
			},
		},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: serviceName(clusterID), Namespace: namespace, Labels: labels}},
	}
}

// podServiceName is the headless Service through which a globalnet cluster exports its probe
// server, so that the server gets a global IP of its own for the pod-to-pod check: other
// clusters cannot route its pod address (docs/architecture.md §6h).
func podServiceName(clusterID string) string { return "probe-pod-" + clusterID }

// globalnetObjects are what verify adds in a globalnet cluster: the headless export of the
// probe server.
func globalnetObjects(namespace, clusterID string) []client.Object {
	return workload.HeadlessExport(namespace, podServiceName(clusterID), map[string]string{managedByLabel: managedBy},
		map[string]string{appLabel: serverName}, corev1.ServicePort{Name: "http", Port: httpPort})
}
