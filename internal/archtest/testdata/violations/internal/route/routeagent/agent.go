// Package routeagent is Kubernetes-side: it may import k8s.io/api, under internal/route.
package routeagent

import _ "k8s.io/api/core/v1"
