module k8s.io/client-go

go 1.26.0
