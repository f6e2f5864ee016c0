#!/usr/bin/env bash
# bench_mip_smoke: bench/mip_bound.py, the optimality table's second certificate (CP-SAT, and a MIP
# solved by HiGHS). Asserts that (1) on the 18 rows of 1F1B, ZB-H1 and ZB-1p at p = 2 (uniform and
# skewed costs), every one proven optimal by our branch and bound, CP-SAT and HiGHS each find the
# same optimum (--check); (2) a row whose claimed optimum is below the true one is caught (no plan
# that short, exit 1), by either; (3) on the 1F1B rows CP-SAT proves the published order at p = 8,
# m = 16 optimal (73), which our bound leaves at 71.8, so 9 of the 9 rows are within 1% where our
# bound says 8; (4) every plan either solver finds replays through our validator and simulator
# (zpipe_replay_plan) at the solver's span, and the replay refuses a plan over the memory limit;
# (5) the large-neighbourhood search with CP-SAT's exact repairs (--lns, alone: --time-limit 0)
# takes uniform V-Half p = 4, m = 8 from the greedy pass's plan (56.2; the default plan is the
# optimum since the search follows the critical path) to the optimum our bound proves (54.8), and
# its plan replays at that span. About 30 seconds.
#   mip_smoke.sh ZPIPE_OPTIMAL_TABLE PYTHON SOURCE_DIR ZPIPE_REPLAY_PLAN
set -uo pipefail
table=$1 py=$2 src=$3 replay=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "mip_smoke: $*" >&2; exit 1; }
"$py" -c "import highspy, ortools" ||
  fail "$py cannot import highspy and ortools (scripts/requirements.txt): run scripts/setup"
for costs in "--costs uniform" "--costs skewed --comm 0.3"; do
  # shellcheck disable=SC2086
  "$table" --budget 1 --max-p 2 --schedule 1f1b --schedule zb-h1 --schedule zb-1p $costs \
    --models "$tmp/small" >/dev/null || fail "zpipe_optimal_table failed"
done
for solver in cp-sat highs; do
  out=$(PYTHONDONTWRITEBYTECODE=1 "$py" "$src/bench/mip_bound.py" "$tmp/small" --rows all --check \
    --solver $solver --replay "$replay")
  status=$?
  echo "$out"
  [[ $status == 0 ]] || fail "$solver and our solver disagree on a row both settled (exit $status)"
  settled=$(grep -cE '^(uniform|skewed) +(1f1b|zb-h1|zb-1p) +2 .* Optimal ' <<<"$out")
  [[ $settled == 18 ]] || fail "want 18 rows settled by $solver, got $settled"
  grep -q "^replayed 18 of $solver's plans through our validator and simulator: every span agrees" \
    <<<"$out" || fail "want 18 of $solver's plans replayed at its spans"
done
# All eight forwards first on rank 0, at 1F1B's limit of two: the replay must refuse it.
{
  echo "zpipe-plan v1"; echo "schedule 1f1b"; echo "placement linear ranks 2 chunks 1 microbatches 8"
  echo "rank 0"; for i in 0 1 2 3 4 5 6 7; do echo "F s0 mb$i"; done
  for i in 0 1 2 3 4 5 6 7; do echo "BW s0 mb$i"; done
  echo "rank 1"; for i in 0 1 2 3 4 5 6 7; do echo "F s1 mb$i"; echo "BW s1 mb$i"; done
} >"$tmp/over.plan"
out=$("$replay" "$tmp/small/uniform-1f1b-p2-m8.json" "$tmp/over.plan" 2>&1)
status=$?
echo "$out"
[[ $status == 1 ]] || fail "zpipe_replay_plan took a plan over the memory limit (exit $status)"
grep -q "invalid plan: .*memory" <<<"$out" || fail "the replay did not say the memory is over"

mkdir "$tmp/wrong"
"$py" - "$tmp/small/uniform-zb-h1-p2-m4.json" "$tmp/wrong/row.json" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
assert model["optimal"], model
model["span"] *= 0.95  # a claimed optimum no plan reaches
json.dump(model, open(sys.argv[2], "w"))
PY
for solver in cp-sat highs; do
  out=$(PYTHONDONTWRITEBYTECODE=1 "$py" "$src/bench/mip_bound.py" "$tmp/wrong" --rows all \
    --solver $solver 2>&1)
  status=$?
  echo "$out"
  [[ $status == 1 ]] || fail "$solver: a claimed optimum 5% below the true one passed (exit $status)"
  grep -q "the model and the simulator disagree" <<<"$out" || fail "$solver: no disagreement reported"
done

"$table" --budget 1 --schedule 1f1b --models "$tmp/1f1b" >/dev/null || fail "zpipe_optimal_table failed"
out=$(PYTHONDONTWRITEBYTECODE=1 "$py" "$src/bench/mip_bound.py" "$tmp/1f1b")
status=$?
echo "$out"
[[ $status == 0 ]] || fail "mip_bound.py failed on the 1F1B rows (exit $status)"
grep -qE '^uniform +1f1b +8 +16 +73 +71\.8 +73 +73 +Optimal ' <<<"$out" ||
  fail "1F1B p = 8, m = 16 not proven optimal (73) by CP-SAT"
grep -qE '^uniform: 9 rows: .*within 1% of the bound on 8, of the better bound 9; ' <<<"$out" ||
  fail "want 9 of 9 rows within 1% with CP-SAT, 8 without"

# The search with exact repairs, from the greedy pass's plan alone (no full solve first), stops at
# our proven bound.
"$table" --budget 1 --max-p 4 --schedule v-half --models "$tmp/vhalf" --models-plan greedy \
  >/dev/null ||
  fail "zpipe_optimal_table failed"
mkdir "$tmp/lns"
cp "$tmp/vhalf/uniform-v-half-p4-m8.json" "$tmp/lns/"
out=$(PYTHONDONTWRITEBYTECODE=1 "$py" "$src/bench/mip_bound.py" "$tmp/lns" --rows all \
  --time-limit 0 --lns 60 --workers 1 --replay "$replay")
status=$?
echo "$out"
[[ $status == 0 ]] || fail "mip_bound.py --lns failed (exit $status)"
grep -qE '^  lns: 56\.2 -> 54\.8 \(0\.00% over the better bound; ' <<<"$out" ||
  fail "want the search to take V-Half p = 4, m = 8 from 56.2 to its optimum 54.8"
grep -q "^replayed 1 of cp-sat's plans through our validator and simulator: every span agrees" \
  <<<"$out" || fail "want the search's plan replayed at its span"
