#!/usr/bin/env bash
# Runs the test suite in two tiers side by side and prints one summary (hack/testreport):
#   lab   ./internal/lab/... and every other package whose tests take the machine-wide lab lock
#         (testenv.LabNetwork: the data path in the lab's address ranges), one package at a
#         time (-p 1), at normal CPU priority;
#   fast  lint (make lint), every other package (unit tests, real control planes), then a short
#         fuzz run of each fuzz target, at the lowest CPU priority (nice 19). Lint runs here,
#         beside the lab tier, rather than before both: on a cold cache it is minutes of
#         type-checking that the lab tier need not wait for.
# A package waiting for the lab lock in the fast tier would hold one of its two slots for as
# long as a lab test runs (a loaded run measured internal/datapath/tunnel at 734 s, most of it
# waiting), so those packages queue behind the lab in its own tier instead.
# The lab's API servers, kubelets and gateways run on timings (Leases, probes) that a loaded
# machine breaks: with both tiers in one `go test ./...`, packages that start their own etcd and
# API servers ran beside the lab at full weight and a lab that comes up in 35 s took 109-443 s
# (load 75-118). At nice 19 the fast tier gets the CPU the lab leaves idle, so the suite still
# takes about as long as the lab tier alone.
#
# TIERS selects the tiers ("lab fast" by default); CI=true makes a skipped test fail the run.
# LAB_SLOT names a file whose flock the lab tier waits for and holds: lab runs from several
# checkouts on one machine then queue instead of failing with "another lab is running".
# Each tier's `go test -json` stream is kept in $TEST_OUT (a temporary directory by default).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
TIERS=${TIERS:-lab fast}
FUZZTIME=${FUZZTIME:-20000x}
out=${TEST_OUT:-$(mktemp -d -t octopus-test-XXXXXX)}
mkdir -p "$out"
report=(-fail-on-skip)
[[ ${CI:-} == true ]] || report=()
testreport="$out/testreport"
$GO build -o "$testreport" ./hack/testreport

# Each tier's live view goes to the terminal with its name in front, so that the two tiers'
# lines can be told apart.
live() { "$testreport" | sed -u "s/^/[$1] /"; }

pids=() streams=()
begin=$(date +%s)
# The packages of the lab tier: every package with a test that takes the lab lock.
mapfile -t lab < <(git grep -l 'testenv.LabNetwork(' -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's|^|./|')
lab+=(./internal/lab/...)
if [[ " $TIERS " == *" lab "* ]]; then
  echo "==> lab tier: go test -p 1 of ${lab[*]} (progress below as each package ends)"
  (
    if [[ -n ${LAB_SLOT:-} ]]; then
      exec 9>"$LAB_SLOT"
      echo "[lab] waiting for the lab slot $LAB_SLOT"
      flock 9
      echo "[lab] holding the lab slot"
    fi
    $GO test -count=1 -p 1 -timeout 60m -json "${lab[@]}" 2>&1 | tee "$out/lab.json" | live lab ) &
  pids+=($!) streams+=("$out/lab.json")
fi
if [[ " $TIERS " == *" fast "* ]]; then
  mapfile -t fast < <(comm -23 <($GO list ./... | sort) <($GO list "${lab[@]}" | sort))
  echo "==> fast tier: lint, go test of ${#fast[@]} packages, then fuzzing, at nice 19"
  (
    : > "$out/fast.json"
    # A lint failure shows in the summary as the lint tier's; the tests run all the same.
    if ! nice -n 19 make --no-print-directory lint > "$out/lint.log" 2>&1; then
      echo '{"Action":"fail","Package":"make lint (see '"$out"'/lint.log)","Elapsed":0}' >> "$out/fast.json"
      tail -40 "$out/lint.log" | sed 's/^/[lint] /'
    else
      echo '[lint] ok   gofmt, go vet and golangci-lint'
    fi
    # A failed test shows in the summary; the fuzz targets run all the same.
    nice -n 19 $GO test -count=1 -timeout 40m -json "${fast[@]}" 2>&1 | tee -a "$out/fast.json" | live fast || true
    # The fuzz targets are run by make (FUZZ_TARGETS), one at a time; a failure shows in the
    # summary as the fuzz tier's.
    if ! nice -n 19 make --no-print-directory fuzz FUZZTIME="$FUZZTIME" > "$out/fuzz.log" 2>&1; then
      echo '{"Action":"fail","Package":"make fuzz (see '"$out"'/fuzz.log)","Elapsed":0}' >> "$out/fast.json"
      tail -40 "$out/fuzz.log" | sed 's/^/[fuzz] /'
    else
      echo '[fuzz] ok   every fuzz target'
    fi
  ) &
  pids+=($!) streams+=("$out/fast.json")
fi
for p in "${pids[@]}"; do wait "$p" || true; done
echo "==> tiers done in $(( $(date +%s) - begin ))s; streams in $out"
exec "$testreport" "${report[@]}" "${streams[@]}"
