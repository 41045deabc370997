// Package images is the lab's image catalog: the images its real nodes run (busybox, socat, a
// toolbox, CoreDNS, the project's image), built from host files with internal/image and cached,
// and the in-memory registry the nodes' containerd pulls them from.
package images

import "github.com/octopus-mcs/octopus/internal/image"

// The image builder is internal/image's, which `make image` shares with the lab; the lab's
// code names it through this package, next to the catalog.
type (
	// File is image.File.
	File = image.File
	// Spec is image.Spec.
	Spec = image.Spec
)

var (
	// Build is image.Build.
	Build = image.Build
	// Ensure is image.Ensure.
	Ensure = image.Ensure
	// Executable is image.Executable.
	Executable = image.Executable
	// Refs is image.Refs.
	Refs = image.Refs
)
