// Package ovnmaster imports the manifest renderer, provisioning code.
package ovnmaster

import _ "github.com/octopus-mcs/octopus/internal/manifests/render"
