#!/usr/bin/env bash
# bench_reference_smoke: `zpipe_reference_table` (scripts/bench schedules) on the first 12 rows,
# greedy plans, a small relaxation budget. Asserts the table is whole (12 rows, each with a
# ref_opt verdict) and that the per-rank relaxation and the span bound prove the reference's span
# optimal on at least 7 of the rows where ours is not shorter (the span bound alone: 5), so a broken
# relaxation shows here; and that --models writes one problem (bench/mip_model.h) per open row,
# with the reference's span in it. Well under a second.
#   reference_smoke.sh ZPIPE_REFERENCE_TABLE
set -uo pipefail
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
out=$("$1" --budget 0 --limit 12 --prove-nodes 200000 --models "$models")
status=$?
echo "$out"
[[ $status == 0 ]] || exit "$status"
rows=$(grep -cE '^zb-(1p|2p|v) .* (yes|\?|-)$' <<<"$out")
[[ $rows == 12 ]] || { echo "reference_smoke: want 12 rows with a ref_opt verdict, got $rows" >&2; exit 1; }
proven=$(sed -nE 's/.*reference.s span proven optimal on ([0-9]+) of them.*/\1/p' <<<"$out")
[[ -n $proven && $proven -ge 7 ]] || { echo "reference_smoke: want the reference proven optimal on >= 7 rows, got '${proven}'" >&2; exit 1; }
open=$(grep -cE '^zb-(1p|2p|v) .* \?$' <<<"$out")
written=$(find "$models" -name 'reference-*.json' | wc -l)
[[ $written == "$open" && $open -ge 1 ]] ||
  { echo "reference_smoke: want one model per open row ($open), got $written" >&2; exit 1; }
grep -q '"span": ' "$(find "$models" -name 'reference-*.json' | head -n 1)" ||
  { echo "reference_smoke: a model without the reference's span" >&2; exit 1; }
