// Package crossdns links an internal package.
package crossdns

import _ "github.com/octopus-mcs/octopus/internal/kube"
