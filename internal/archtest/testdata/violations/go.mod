// A module that breaks every rule of package archtest, with the path of the real one so that
// the rules apply as they are. Stand-ins under stubs/ replace the Kubernetes modules.
module github.com/octopus-mcs/octopus

go 1.26.0

require (
	k8s.io/api v0.0.0
	k8s.io/client-go v0.0.0
	sigs.k8s.io/controller-runtime v0.0.0
)

replace (
	k8s.io/api => ./stubs/api
	k8s.io/client-go => ./stubs/client-go
	sigs.k8s.io/controller-runtime => ./stubs/controller-runtime
)
