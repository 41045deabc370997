// Wrapper module that pins the flannel CNI plugin of the lab's real nodes with `lab up --cni
// flannel` (built by hack/flannel.sh). The plugin moved from containernetworking/plugins to
// flannel-io/cni-plugin after v0.9.1, but the Go module proxy serves no version of the latter;
// v0.9.1 is the same plugin (it reads flanneld's subnet.env and delegates to the bridge and
// host-local plugins Debian's containernetworking-plugins installs).
module github.com/octopus-mcs/octopus/hack/k8s/flannel-cni

go 1.26.0

tool github.com/containernetworking/plugins/plugins/meta/flannel

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/containernetworking/plugins v0.9.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
