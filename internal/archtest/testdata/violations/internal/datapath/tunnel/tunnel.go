// Package tunnel imports client-go directly.
package tunnel

import _ "k8s.io/client-go/rest"
