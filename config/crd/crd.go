// Package crd embeds the CustomResourceDefinitions Octopus installs, so that the CLI and the
// agents install exactly the schema they were built with: the ones generated from api/ by
// `make generate` (bases/) and the Multi-Cluster Services CRDs of sigs.k8s.io/mcs-api (mcs/).
package crd

import (
	"embed"
	"fmt"
	"io/fs"
	"path"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// The files under mcs/ are byte-for-byte copies of config/crd/*.yaml of sigs.k8s.io/mcs-api
// v0.5.2 (the version go.mod requires; TestMCSCRDsMatchModule keeps them equal when it is
// bumped). They are copied rather than loaded from that module's own embed package so that
// every CRD Octopus installs lives in this one tree and is read the same way.
//
//go:embed bases/*.yaml mcs/*.yaml
var files embed.FS

const (
	mcsServiceExports = "mcs/multicluster.x-k8s.io_serviceexports.yaml"
	mcsServiceImports = "mcs/multicluster.x-k8s.io_serviceimports.yaml"
)

// Hub returns the CRDs the hub serves: what clusters publish there. Exported services are
// published as ServiceImport-shaped records, so the hub serves the MCS ServiceImport CRD too.
func Hub() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return load("bases/octopus.io_clusters.yaml", "bases/octopus.io_peers.yaml", "bases/octopus.io_gatewayexips.yaml", mcsServiceImports)
}

// Member returns the Octopus CRDs every member cluster serves. They belong to Octopus alone, so
// leaving the cluster set removes them; the MCS CRDs, which hold users' ServiceExports and may
// be shared with other tools, are in MCS instead.
func Member() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return load("bases/octopus.io_fabrics.yaml", "bases/octopus.io_globalingressips.yaml",
		"bases/octopus.io_globalegressips.yaml", "bases/about.k8s.io_clusterproperties.yaml",
		"bases/octopus.io_vpcs.yaml", "bases/octopus.io_vpcnattunnels.yaml", "bases/octopus.io_vpcdnsforwards.yaml",
		"bases/octopus.io_gatewayexips.yaml", "bases/octopus.io_interconnectroutes.yaml")
}

// MCS returns the Multi-Cluster Services CRDs (ServiceExport, ServiceImport) of
// sigs.k8s.io/mcs-api, which every member cluster serves.
func MCS() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return load(mcsServiceExports, mcsServiceImports)
}

// All returns every CRD embedded here.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var names []string
	for _, pattern := range []string{"bases/*.yaml", "mcs/*.yaml"} {
		m, err := fs.Glob(files, pattern)
		if err != nil {
			return nil, err
		}
		names = append(names, m...)
	}
	return load(names...)
}

func load(paths ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(paths))
	for _, p := range paths {
		data, err := files.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading embedded CRD %s: %w", path.Base(p), err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decoding embedded CRD %s: %w", path.Base(p), err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}
