// Package v1alpha1 imports a package of the repository.
package v1alpha1

import _ "github.com/octopus-mcs/octopus/internal/kube"
