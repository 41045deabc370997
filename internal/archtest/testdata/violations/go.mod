// A module that breaks every rule of package archtest, with the path of the real one so that
// the rules apply as they are. Stand-ins under stubs/ replace the Kubernetes modules.
module github.com/octopus-mcs/octopus

go 1.26.0
