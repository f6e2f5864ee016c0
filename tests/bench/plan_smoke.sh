#!/usr/bin/env bash
# bench_plan_smoke: `scripts/bench plan` with two runs a row against the built zpipe. Asserts that
# the table comes out whole (every row timed, the eight planning rows with a verdict), not the
# times: machines differ. Exits 77 (skipped) without hyperfine or jq.
#   plan_smoke.sh ZPIPE
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(RUNS=2 WARMUP=0 ZPIPE_BIN=$1 scripts/bench.d/plan)
status=$?
echo "$out"
[[ $status == 0 ]] || exit "$status"
rows=$(grep -cE '^(zb-2p|zb-v) .* (ok|OVER)$' <<<"$out")
[[ $rows == 8 ]] || { echo "plan_smoke: want 8 timed plan rows, got $rows" >&2; exit 1; }
grep -qE '^--version ' <<<"$out" || { echo "plan_smoke: no --version row" >&2; exit 1; }
