module sigs.k8s.io/controller-runtime

go 1.26.0
