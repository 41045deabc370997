// Package containerd only exists so that `go mod tidy` records every dependency of the
// containerd commands that hack/containerd.sh builds: the packages their main packages import.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task/plugin"
	_ "github.com/containerd/containerd/v2/cmd/containerd/builtins"
	_ "github.com/containerd/containerd/v2/cmd/containerd/command"
	_ "github.com/containerd/containerd/v2/cmd/ctr/app"
	_ "github.com/containerd/containerd/v2/pkg/shim"
	_ "github.com/containerd/containerd/v2/pkg/tracing/plugin"
)
