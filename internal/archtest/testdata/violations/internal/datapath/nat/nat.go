// Package nat links controller-runtime through internal/kube.
package nat

import _ "github.com/octopus-mcs/octopus/internal/kube"
