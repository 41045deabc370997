// Package kube holds the small Kubernetes client helpers every Octopus component shares: the
// scheme with all the types Octopus reads and writes, and server-side apply of typed objects.
package kube

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	octopusv1alpha1 "github.com/octopus-mcs/octopus/api/v1alpha1"
)

// Scheme knows the built-in Kubernetes types, CRDs, the Octopus and about.k8s.io APIs, and the
// storage version of the Multi-Cluster Services API.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(octopusv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(aboutv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(mcsv1beta1.Install(Scheme))
}
