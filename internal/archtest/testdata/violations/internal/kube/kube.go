// Package kube imports controller-runtime, as the real one does.
package kube

import _ "sigs.k8s.io/controller-runtime/pkg/client"
