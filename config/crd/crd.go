// Package crd embeds the CustomResourceDefinitions generated from api/ by `make generate`, so
// that the CLI and the agents install exactly the schema they were built with.
package crd

import (
	"embed"
	"fmt"
	"io/fs"
	"path"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed bases/*.yaml
var bases embed.FS

// Hub returns the CRDs the hub serves: what clusters publish there.
func Hub() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return load("octopus.io_clusters.yaml", "octopus.io_peers.yaml")
}

// Member returns the CRDs every member cluster serves.
func Member() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return load("octopus.io_fabrics.yaml", "about.k8s.io_clusterproperties.yaml")
}

// All returns every CRD in the repository.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(bases, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	for i := range names {
		names[i] = path.Base(names[i])
	}
	return load(names...)
}

func load(files ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, f := range files {
		data, err := bases.ReadFile("bases/" + f)
		if err != nil {
			return nil, fmt.Errorf("reading embedded CRD %s: %w", f, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decoding embedded CRD %s: %w", f, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}
