# Octopus. `make demo` runs the main job on one Linux machine (root); `make test` runs everything.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

BIN       := $(CURDIR)/bin
GO        ?= go
TOOLS := $(CURDIR)/hack/tools
CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT  := $(BIN)/golangci-lint
PROMTOOL       := $(BIN)/promtool
HELM           := $(BIN)/helm

.PHONY: all build test test-fast test-lab fuzz lint generate k8s-binaries deps tools demo clean

# Every go command builds with -trimpath, the tests' own `go build`s included (they inherit
# GOFLAGS): the lab's commands must be -trimpath (the same bytes in every checkout, so the
# content-keyed image cache serves a clean clone), and one build configuration for everything
# means each package is compiled once per content, not once per configuration and checkout
# path, which on a cold cache compiled the project's dependencies twice.
export GOFLAGS := $(strip -trimpath $(GOFLAGS))

all: build

## deps: Debian packages the lab and the tests need (idempotent; skipped when present).
deps:
	@hack/install-deps.sh

## tools: developer tools, each pinned by its own module under hack/tools, built into ./bin.
tools: $(CONTROLLER_GEN) $(GOLANGCI_LINT) $(PROMTOOL) $(HELM)
$(HELM): $(TOOLS)/helm/go.mod
	cd $(TOOLS)/helm && $(GO) build -o $@ helm.sh/helm/v4/cmd/helm
$(CONTROLLER_GEN): $(TOOLS)/controller-gen/go.mod
	cd $(TOOLS)/controller-gen && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen
$(GOLANGCI_LINT): $(TOOLS)/golangci-lint/go.mod
	cd $(TOOLS)/golangci-lint && $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint
# promtool checks and unit-tests config/monitoring/alerts.yaml (config/monitoring's test).
$(PROMTOOL): $(TOOLS)/promtool/go.mod
	cd $(TOOLS)/promtool && $(GO) build -o $@ github.com/prometheus/prometheus/cmd/promtool

## k8s-binaries: etcd, the Kubernetes binaries (control plane, kube-proxy, kubectl, kubelet),
## CoreDNS (the lab's cluster DNS), containerd (the runtime of the lab's real nodes) and flannel
## (their second CNI, `lab up --cni flannel`), built from pinned modules and cached.
k8s-binaries:
	@hack/k8s-binaries.sh >/dev/null
	@hack/coredns.sh >/dev/null
	@hack/containerd.sh >/dev/null
	@hack/flannel.sh >/dev/null

## build: the octopus CLI and the octopus-agent daemon into ./bin.
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## generate: deepcopy functions and CRD manifests from api/.
generate: $(CONTROLLER_GEN)
	hack/generate.sh $(CONTROLLER_GEN)

## lint: gofmt, go vet and golangci-lint.
lint: $(GOLANGCI_LINT)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed on:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

## test: everything — lint, unit, real control planes, end to end, a short fuzz run: the lab
## tier (./internal/lab/..., one package at a time) beside the fast tier (lint, the rest, then
## fuzzing, at the lowest CPU priority), with one summary of both (hack/run-tests.sh). In CI
## (CI=true, as root) a skipped test fails the run.
test: deps tools k8s-binaries build
	@hack/run-tests.sh

## test-fast: lint, unit tests, real-control-plane packages and fuzzing, without the labs.
test-fast: deps tools k8s-binaries build
	@TIERS=fast hack/run-tests.sh

## test-lab: the end-to-end tests on real labs alone.
test-lab: deps k8s-binaries build
	@TIERS=lab hack/run-tests.sh

# FUZZTIME is a duration or an execution count (Nx). The test target uses a count: Go 1.26's
# fuzz coordinator can fail a run that found nothing with "context deadline exceeded" when a
# duration ends while a worker is busy (golang/go#75804), as when it minimizes a new input.
FUZZTIME ?= 2m
# FUZZMINIMIZETIME bounds the minimization of each new interesting input, which otherwise
# may take a minute of the run.
FUZZMINIMIZETIME ?= 1000x
# FUZZ_TARGETS: every fuzz test, as <package>:<name>; `go test -fuzz` runs one at a time.
FUZZ_TARGETS := ./internal/hub:FuzzDecodeBrokerInfo ./internal/dnsconfig:FuzzPatchRoundTrip ./pkg/crossdns:FuzzServeDNS
FUZZ_TARGETS += ./internal/ipam/hostaddr:FuzzNext
FUZZ_TARGETS += ./internal/globalnet/globalip:FuzzAssign
FUZZ_TARGETS += ./internal/gateway:FuzzCompute
FUZZ_TARGETS += ./internal/secondarynet/podnet:FuzzNetworkStatus
FUZZ_TARGETS += ./internal/datapath/pathprobe:FuzzAnswer
FUZZ_TARGETS += ./internal/servicediscovery:FuzzMergeRecords
## fuzz: fuzz the parsers of untrusted input, each for FUZZTIME.
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  echo "==> fuzzing $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
	  $(GO) test -run='^$$' -fuzz="^$${t#*:}$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZETIME) "$${t%%:*}" || exit 1; \
	done

# DEMO_CMDS are the commands `lab up --demo` runs: the CLI and the daemons of the project's
# image (internal/image.DaemonBinaries). Not octopus-ovn: with it in ./bin the lab would also
# build the secondary network's image, which the demo does not use.
DEMO_CMDS := octopus octopus-agent octopus-dns octopus-echo octopus-operator
## demo: a hub and two clusters on this machine, joined, with an exported echo service; Ctrl-C
## cleans up. It installs and builds only what the demo runs (no browser, OVN, benchmark tools
## or flannel); `make test` still installs everything.
demo:
	@hack/install-deps.sh demo
	@hack/k8s-binaries.sh >/dev/null
	@hack/coredns.sh >/dev/null
	@hack/containerd.sh >/dev/null
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(DEMO_CMDS))
	$(BIN)/octopus lab up --clusters 2 --demo

clean:
	rm -rf $(BIN)

# VERSION tags the image and is stamped into its binaries (internal/version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
.PHONY: image
## image: the project's OCI image (every daemon, nft, busybox) as bin/octopus-image-$(VERSION).tar,
## and the secondary network's (octopus-ovn, Open vSwitch, OVN) as bin/octopus-ovn-image-$(VERSION).tar,
## built from this machine's files without a container engine (hack/image); Containerfile
## builds the project's image's layout with a container engine.
image:
	$(GO) run -ldflags "-X github.com/octopus-mcs/octopus/internal/version.Version=$(VERSION)" ./hack/image

.PHONY: lint-charts
## lint-charts: helm lint --strict of both charts with the pinned helm CLI (the tests run the
## SDK's linter too: charts/charts_test.go).
lint-charts: $(HELM)
	$(HELM) lint --strict charts/octopus-hub --namespace octopus-hub
	$(HELM) lint --strict charts/octopus-member --namespace octopus-system
