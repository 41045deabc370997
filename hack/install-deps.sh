#!/usr/bin/env bash
# Installs the Debian packages Octopus's build, tests and lab need. Idempotent: packages that
# are present are not touched, and apt is only called when something is missing.
#
# Usage: hack/install-deps.sh [all|demo]
#   all (the default, `make deps` and `make test`): everything below.
#   demo (`make demo`): only what `octopus lab up --demo` runs: the lab's nodes (nft, runc, the
#   CNI plugins, util-linux's unshare and mount) and the images made of host files (busybox,
#   socat, the toolbox's tools). No browser, no OVN, no benchmark tools: on a fresh machine
#   those were most of the demo's wait.
set -euo pipefail
MODE="${1:-all}"
case "${MODE}" in
  all | demo) ;;
  *) echo "usage: $0 [all|demo]" >&2; exit 2 ;;
esac

# nftables: the nft tool kube-proxy (nftables mode) drives in every lab node. iproute2: `ip netns`
# for looking into lab namespaces (the lab itself uses netlink).
# busybox and socat: the programs of the busybox and alpine/socat images the lab builds for its
# nodes from the host's files (internal/lab/images).
# dnsutils (dig, nslookup) and dnsperf: the octopus-dns test (cmd/octopus-dns) and the DNS benchmark (hack/bench/dns).
# netcat-openbsd (nc), curl, wget, dnsutils and iputils-ping: the tools a toolbox image such as
# nicolaka/netshoot ships, which the lab's toolbox image is made of (internal/lab/images).
# iperf3, iputils-ping, wireguard-go and wireguard-tools (wg): the tunnel benchmark
# (hack/bench/tunnel) measures pod → pod with iperf3 and ping and compares our wireguard driver
# with Debian's wireguard-go program configured by `wg`.
# ovn-central (ovsdb-server with the NB/SB schemas, ovn-northd), ovn-host (ovn-controller) and
# openvswitch-switch (ovs-vswitchd, ovs-vsctl): the secondary network. Its tests start their own
# NB ovsdb-server on a unix socket (internal/datapath/ovn/ovntest) and the NB models are generated from
# the installed NB schema (internal/datapath/ovn/nbdb). The packages' services are not needed:
# nothing here relies on systemd or on the daemons apt may start.
DEMO_PACKAGES=(git make ca-certificates nftables iproute2 busybox socat dnsutils util-linux mount
  iputils-ping netcat-openbsd curl wget runc containernetworking-plugins)
PACKAGES=("${DEMO_PACKAGES[@]}" dnsperf iperf3 wireguard-go wireguard-tools
  ovn-central ovn-host openvswitch-switch)
# chromium: the `octopus dashboard` tests drive the page in a real headless browser over the
# Chrome DevTools Protocol (internal/browser, chromedp, which starts chromium itself: no
# chromedriver; internal/dashboard/browser_test.go, internal/lab/dashboard_test.go). Not pinned
# to a build: Debian's security archive keeps only its newest chromium, so an exact version
# stops installing when the next build replaces it (CI failed on 156.0.8078.79 once .108 had
# replaced it); the tests need only the DevTools protocol, stable across builds.
BROWSER=(chromium)
# ovn-ic (the ovn-ic daemon) and ovn-ic-db (the IC NB and IC SB schemas; ovn-ic-nbctl and
# ovn-ic-sbctl come with ovn-common): OVN interconnection. Its test starts its own IC databases
# and one ovn-ic per AZ (internal/datapath/ovnic), and the IC SB models are generated from the
# installed schema (hack/ovn-models.sh ic-sb); as for ovn-central, the services are not needed.
PACKAGES+=(ovn-ic ovn-ic-db)
if [[ "${MODE}" == demo ]]; then
  PACKAGES=("${DEMO_PACKAGES[@]}") BROWSER=()
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#BROWSER[@]})); then
  browser_versions=$(for p in "${BROWSER[@]}"; do
    dpkg-query -W -f='${Status} ${Version}\n' "$p" 2>/dev/null || echo "$p missing"
  done | sort -u)
  if [[ $(wc -l <<<"$browser_versions") -ne 1 || $browser_versions != "install ok installed "* ]]; then
    missing+=("${BROWSER[@]}")
  fi
fi
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "missing Debian packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "==> installing Debian packages: ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
