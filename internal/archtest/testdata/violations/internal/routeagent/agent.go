// Package routeagent is Kubernetes-side: it may import k8s.io/api, next to the data plane.
package routeagent

import _ "k8s.io/api/core/v1"
