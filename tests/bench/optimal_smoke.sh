#!/usr/bin/env bash
# bench_optimal_smoke: `zpipe_optimal_table` (scripts/bench schedules) on ZB-1p and V-Half at
# p <= 4, 0.2 s of solver a row. Asserts the table is whole (12 rows, each with its verdict) and
# that the solver proves the optimum on at least 9 of them (the ZB-1p rows by each rank's
# relaxation, V-Half p = 4, m = 4 and 16 by its chains, all before the tree opens a node: node
# budgets, not the clock) with the default plan within 1% on at least 11, so a broken
# relaxation, chain or polish shows here. About 7 seconds.
#   optimal_smoke.sh ZPIPE_OPTIMAL_TABLE
set -uo pipefail
out=$("$1" --budget 0.2 --schedule zb-1p --schedule v-half --max-p 4)
status=$?
echo "$out"
[[ $status == 0 ]] || exit "$status"
rows=$(grep -cE '^(zb-1p|v-half) .* (yes|no) +-?[0-9.]+% +-?[0-9.]+% +[0-9]+$' <<<"$out")
[[ $rows == 12 ]] || { echo "optimal_smoke: want 12 rows with a verdict, got $rows" >&2; exit 1; }
summary=$(grep -E '^12 rows: optimum proven on' <<<"$out")
proven=$(sed -nE 's/.*optimum proven on ([0-9]+);.*/\1/p' <<<"$summary")
within=$(sed -nE 's/.*within 1% of the bound on ([0-9]+),.*/\1/p' <<<"$summary")
[[ -n $proven && $proven -ge 9 ]] || { echo "optimal_smoke: want >= 9 rows proven optimal, got '${proven}'" >&2; exit 1; }
[[ -n $within && $within -ge 11 ]] || { echo "optimal_smoke: want >= 11 default plans within 1%, got '${within}'" >&2; exit 1; }
