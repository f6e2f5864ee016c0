"""A second certificate for the optimality table: each row's problem solved by a general solver,
OR-Tools' CP-SAT (the default) or HiGHS as a mixed-integer model (ortools and highspy, pinned in
scripts/requirements.txt).

zpipe_optimal_table --models DIR writes each row's problem (stages with their rank, costs and
memory, the memory limit, T_comm, the default plan's span and what our branch and bound proved);
zpipe_reference_table --models DIR each open row's (ours is not shorter than the ZB paper's
reference generator, and our bound does not prove the reference's span optimal), with the
reference's span as the one in question.
This solves the same problem with a different method, whose optimum is the least span and whose
proven bound, when the time limit ends it first, is a lower bound. Where our own bound leaves the
default plan more than 1% from it, this may close the gap (1F1B at p = 8, m = 16: the rank
relaxation proves 71.8, HiGHS and CP-SAT the plan's 73 optimal; skewed ZB-V at p = 8, m = 16: our
bound 105.77, CP-SAT proves 106.98 optimal, 0.12% under the plan) or show that the plan, not the
bound, is off (skewed V-Half at p = 4, m = 16: CP-SAT proves 106.064 optimal, the plan spans
108.34); where our solver proved the optimum, the two must agree (--check, the test
bench_mip_smoke).

The model (docs/design.md, "A second certificate"):
- Kinds: the F, B and W (BW when the plan fuses them) of each stage; a microbatch's kinds form the
  chain F(0) .. F(S-1), B(S-1) .. B(0), each W after its B, with T_comm between stages on
  different ranks. Each kind runs its microbatches first-in first-out: two actions of one kind are
  interchangeable (same duration, same memory), so swapping the microbatches of an out-of-order
  pair, and of everything after them, gives a plan with the same times. So the i-th action of a
  kind is microbatch i's, and no optimum is lost.
- CP-SAT (--solver cp-sat): the start of each (kind, microbatch) as an integer (the costs scaled
  to whole numbers: a row whose costs are not multiples of some 1 / D, D at most a million, is
  skipped), each rank's actions as intervals that do not overlap, and its memory as a reservoir
  that each action's start changes by its memory, at most the limit. The model's `plan` (the
  default plan's start times, each kind's in order) is the solver's first hint: without it CP-SAT
  finds no plan for skewed V-Half at p = 4, m = 16 in 120 s, with it it proves the optimum in 50.
- HiGHS (--solver highs), a MIP: the start of each (kind, microbatch), the span T, and for two
  actions of different kinds on one rank whose order the chain does not fix, a binary for which
  runs first, with the ranks' one-at-a-time rule as big-M pairs (M: twice the plan's span plus the
  longest action, enough for any plan of span at most the plan's: every action but a W precedes
  its microbatch's last B on rank 0, and rank 0 starts at 0). Memory: at each action that adds
  memory, the rank's sum over the actions before it (in the binaries' order) plus its own is at
  most the limit, as the validator checks it.
- Span: the longest over ranks of the last end less the rank's first start (its first stage's F of
  microbatch 0, by FIFO), as the simulator measures it; at most the plan's span.

  mip_bound.py DIR [--solver cp-sat|highs] [--time-limit S] [--rows over|unproven|all] [--check]
               [--replay ZPIPE_REPLAY_PLAN] [--lns S [--lns-actions N] [--lns-step-limit S]]
"""

import argparse
import fractions
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time


def kinds_of(model):
    """(rank, duration, memory, predecessor, delay, label) of each kind, in chain order, then the
    Ws; label: (action name as the zpipe-plan text writes it, stage)."""
    stages = model["stages"]
    count = len(stages)
    split = model["split"]
    rank_of = [s["rank"] for s in stages]
    kinds, b_kind, prev = [], {}, -1
    for step in range(2 * count):
        forward = step < count
        s = step if forward else 2 * count - 1 - step
        delay = 0.0
        if 0 < step != count:
            before = step - 1 if step - 1 < count else 2 * count - step
            if rank_of[before] != rank_of[s]:
                delay = model["comm"]
        st = stages[s]
        if forward:
            dur, mem = st["f"], st["mem_f"]
        elif split:
            dur, mem = st["b"], st["mem_b"]
        else:
            dur, mem = st["b"] + st["w"], st["mem_b"] + st["mem_w"]
        name = "F" if forward else "B" if split else "BW"
        kinds.append((rank_of[s], dur, mem, prev, delay, (name, s)))
        prev = len(kinds) - 1
        if not forward:
            b_kind[s] = prev
    if split:
        for s in range(count):
            kinds.append((rank_of[s], stages[s]["w"], stages[s]["mem_w"], b_kind[s], 0.0, ("W", s)))
    return kinds


def order_binaries(model):
    """At most how many order binaries the model has (two actions of different kinds on a rank)."""
    kinds = kinds_of(model)
    per_rank = {}
    for rank, *_ in kinds:
        per_rank[rank] = per_rank.get(rank, 0) + 1
    return sum(n * (n - 1) // 2 for n in per_rank.values()) * model["microbatches"] ** 2


def integer_scale(values):
    """The least D (at most a million) that makes every value a whole number when multiplied by it,
    or None."""
    scale = 1
    for v in values:
        f = fractions.Fraction(v).limit_denominator(10**6)
        if abs(float(f) - v) > 1e-9 * max(1.0, abs(v)):
            return None
        scale = math.lcm(scale, f.denominator)
        if scale > 10**6:
            return None
    return scale


def cpsat_model(model, kinds, whole, mem_whole, upper, current=None, window=None):
    """The row as a CP-SAT model: (model, starts, ends, span), each start and end by [kind][i] in
    whole units, the span at most `upper`. With `current` (each kind's starts, ascending, whole
    units) and `window` (t0, t1): the model of one large-neighbourhood step (lns_cpsat), in which
    every action that starts before t0 keeps its start, each rank's actions that start at t1 or
    later keep their order and come after its actions in the window, and those in [t0, t1) may
    run in any order and at any time after t0 that the rest allows."""
    from ortools.sat.python import cp_model

    m = model["microbatches"]
    horizon = 2 * upper + max(whole(k[1]) for k in kinds)  # as the MIP's big M, below
    cp = cp_model.CpModel()
    start, end, busy = [], [], []
    for k, (rank, dur, _, pred, delay, _) in enumerate(kinds):
        if window is None:
            start.append([cp.new_int_var(0, horizon, f"s{k}_{i}") for i in range(m)])
        else:
            start.append([cp.new_constant(at) if at < window[0] else
                          cp.new_int_var(window[0], horizon, f"s{k}_{i}")
                          for i, at in enumerate(current[k])])
        end.append([cp.new_int_var(0, horizon + whole(dur), f"e{k}_{i}") for i in range(m)])
        busy.append([cp.new_interval_var(start[k][i], whole(dur), end[k][i], f"a{k}_{i}")
                     for i in range(m)])
        for i in range(m):
            if pred >= 0:
                cp.add(start[k][i] >= end[pred][i] + whole(delay))
            if i > 0:
                cp.add(start[k][i] >= end[k][i - 1])
    span = cp.new_int_var(0, upper, "span")
    cp.add(start[0][0] == 0)
    first = {}
    for k, (rank, *_) in enumerate(kinds):
        first.setdefault(rank, k)
    for rank in sorted(first):
        mine = [k for k in range(len(kinds)) if kinds[k][0] == rank]
        cp.add_no_overlap([busy[k][i] for k in mine for i in range(m)])
        for k in mine:
            cp.add(span >= end[k][m - 1] - start[first[rank]][0])
        changes = [(start[k][i], mem_whole(kinds[k][2])) for k in mine for i in range(m)
                   if kinds[k][2] != 0]
        if changes:
            cp.add_reservoir_constraint([t for t, _ in changes], [c for _, c in changes],
                                        -sum(abs(c) for _, c in changes),
                                        mem_whole(model["memory_limit"]))
        if window is not None:
            ordered = sorted((current[k][i], k, i) for k in mine for i in range(m))
            inside = [(k, i) for at, k, i in ordered if window[0] <= at < window[1]]
            after = [(k, i) for at, k, i in ordered if at >= window[1]]
            for (a, i), (b, j) in zip(after, after[1:]):
                cp.add(start[b][j] >= end[a][i])
            if after:
                b, j = after[0]
                for a, i in inside:
                    cp.add(start[b][j] >= end[a][i])
    return cp, start, end, span


def whole_units(model):
    """(kinds, whole, mem_whole, scale): the row's kinds (kinds_of), functions that give its times
    and memory in whole units, and the times' scale; None when its costs are not multiples of some
    1 / D, D at most a million."""
    kinds = kinds_of(model)
    scale = integer_scale([k[1] for k in kinds] + [model["comm"]] + [model["span"]])
    mem_scale = integer_scale([k[2] for k in kinds] + [model["memory_limit"]])
    if scale is None or mem_scale is None:
        return None
    return kinds, (lambda v: int(round(v * scale))), (lambda v: int(round(v * mem_scale))), scale


def plan_starts(model, kinds, plan):
    """Each kind's start times, ascending, from a plan: the model's `plan` ([kind name, stage,
    microbatch, start]) or a solver's ([(start, kind, microbatch)]). The i-th is microbatch i's
    (FIFO, above; sorting keeps every chain's order)."""
    index = {kinds[k][5]: k for k in range(len(kinds))}
    starts = {k: [] for k in range(len(kinds))}
    for entry in plan:
        if isinstance(entry[0], str):
            starts[index[(entry[0], entry[1])]].append(entry[3])
        else:
            starts[entry[1]].append(entry[0])
    return {k: sorted(times)[:model["microbatches"]] for k, times in starts.items()}


def solve_cpsat(model, time_limit, workers):
    """The least span (at most the plan's), or CP-SAT's proven bound when the time limit ends first;
    None when the costs do not scale to whole numbers."""
    from ortools.sat.python import cp_model

    units = whole_units(model)
    if units is None:
        return None
    kinds, whole, mem_whole, scale = units
    m = model["microbatches"]
    cp, start, end, span = cpsat_model(model, kinds, whole, mem_whole, whole(model["span"]))
    # The plan's start times as the first hint.
    for k, times in plan_starts(model, kinds, model.get("plan", [])).items():
        for i, at in enumerate(times):
            cp.add_hint(start[k][i], whole(at))
            cp.add_hint(end[k][i], whole(at) + whole(kinds[k][1]))
    cp.minimize(span)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.random_seed = 1
    if workers:
        solver.parameters.num_workers = workers
    began = time.time()
    result = solver.solve(cp)
    seconds = time.time() - began
    found = solver.objective_value / scale if result in (cp_model.OPTIMAL, cp_model.FEASIBLE) \
        else math.inf
    plan = None
    if found < math.inf:
        plan = [(solver.value(start[k][i]) / scale, k, i)
                for k in range(len(kinds)) for i in range(m)]
    if result == cp_model.OPTIMAL:
        status, bound = "Optimal", found
    elif result == cp_model.INFEASIBLE:
        status, bound = "Infeasible", math.inf
    elif result == cp_model.MODEL_INVALID:
        sys.exit(f"mip_bound: CP-SAT rejects the model: {cp.validate()}")
    else:
        status, bound = "time limit", solver.best_objective_bound / scale
    return {"status": status, "span": found, "bound": bound, "binaries": 0, "seconds": seconds,
            "plan": plan}


def span_of(kinds, starts, whole):
    """The span of a plan given by each kind's starts (whole units), as the simulator measures it
    from those times: the longest rank's first start to last end."""
    first, last = {}, {}
    for k, (rank, dur, *_) in enumerate(kinds):
        for at in starts[k]:
            first[rank] = min(first.get(rank, at), at)
            last[rank] = max(last.get(rank, at + whole(dur)), at + whole(dur))
    return max(last[r] - first[r] for r in first)


# The search's windows by default: 30 actions a rank. Windows of 80 actions took skewed V-Half
# at p = 4, m = 16 from the default plan to 106.148 and stopped there, and at p = 8, m = 32 only
# to 227.4 in 300 s; 120 reach the optimum (106.064) in 71 s, and 240 take p = 8, m = 32 to 225.0
# and p = 8, m = 16 to 123.592 (one worker; docs/performance.md).
LNS_ACTIONS_PER_RANK = 30


def lns_cpsat(model, plan, seconds, window_actions, window_limit, workers, floor=0.0, seed=1,
              log=None):
    """Large-neighbourhood search from `plan` (either form plan_starts takes) for `seconds`, with
    CP-SAT's exact repairs. Each step draws a time window that holds about `window_actions`
    actions on average (that share of the span; t0 uniform, so a window may hang over either end),
    keeps every action that starts before it at its start and each rank's actions after it in
    their order, and has CP-SAT find the best plan for the actions inside (at most `window_limit`
    seconds); a step's plan is kept when its span is no longer, so the search drifts across equal
    plans. It ends at `seconds` or when the span reaches `floor` (a proven bound). Windows of some
    30 actions a rank, every rank's at once, find what moves of a few actions cannot: skewed
    V-Half at p = 4, m = 16 from the default plan's 108.338 to the optimum 106.064 in 71 s, where
    one step reorders two to four pairs of actions on every rank of the early steady state
    (docs/performance.md). Returns {"span", "plan", "steps", "windows", "seconds"}: the best plan
    found (no longer than `plan`) and its span, the shorter plans on the way, the windows solved;
    None when the costs do not scale to whole numbers. `log(text)`, when given, hears of each
    shorter plan."""
    import random

    from ortools.sat.python import cp_model

    units = whole_units(model)
    if units is None:
        return None
    kinds, whole, mem_whole, scale = units
    m = model["microbatches"]
    current = {k: [whole(at) for at in times]
               for k, times in plan_starts(model, kinds, plan).items()}
    best = span_of(kinds, current, whole)
    rng = random.Random(seed)
    began = time.time()
    steps = windows = 0
    while time.time() - began < seconds and best > whole(floor):
        width = max(1, int(best * window_actions / (m * len(kinds))))
        last = max(max(times) for times in current.values())
        t0 = max(0, int(rng.uniform(-width / 2, last)))
        cp, start, end, span = cpsat_model(model, kinds, whole, mem_whole, best, current,
                                           (t0, t0 + width))
        for k in range(len(kinds)):
            for i, at in enumerate(current[k]):
                if at >= t0:
                    cp.add_hint(start[k][i], at)
                cp.add_hint(end[k][i], at + whole(kinds[k][1]))
        cp.minimize(span)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = float(
            min(window_limit, max(0.1, seconds - (time.time() - began))))
        solver.parameters.random_seed = seed
        if workers:
            solver.parameters.num_workers = workers
        result = solver.solve(cp)
        windows += 1
        if result == cp_model.MODEL_INVALID:
            sys.exit(f"mip_bound: CP-SAT rejects the window model: {cp.validate()}")
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            continue
        found = int(round(solver.objective_value))
        if found <= best:
            if found < best and log:
                log(f"{time.time() - began:.0f} s: {found / scale:g} (window {t0 / scale:g} to "
                    f"{(t0 + width) / scale:g})")
            steps += found < best
            best = found
            current = {k: sorted(solver.value(start[k][i]) for i in range(m))
                       for k in range(len(kinds))}
    plan = [(current[k][i] / scale, k, i) for k in range(len(kinds)) for i in range(m)]
    return {"span": best / scale, "plan": plan, "steps": steps, "windows": windows,
            "seconds": time.time() - began}


def solve_highs(model, time_limit):
    """The least span (at most the plan's), or the dual bound when the time limit ends first."""
    import highspy

    kinds = kinds_of(model)
    m = model["microbatches"]
    upper = model["span"] * (1 + 1e-9)
    ancestors = []
    for k in range(len(kinds)):
        found, p = set(), kinds[k][3]
        while p >= 0:
            found.add(p)
            p = kinds[p][3]
        ancestors.append(found)
    big = 2 * upper + max(k[1] for k in kinds)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("threads", 1)
    start = [[h.addVariable(lb=0, ub=big) for _ in range(m)] for _ in kinds]
    span = h.addVariable(lb=0, ub=upper)
    h.addConstr(start[0][0] == 0)
    first = {}
    for k, (rank, *_) in enumerate(kinds):
        first.setdefault(rank, k)  # the rank's first stage's F: its first action
    for k, (rank, dur, _, pred, delay, _) in enumerate(kinds):
        for i in range(m):
            if pred >= 0:
                h.addConstr(start[k][i] >= start[pred][i] + kinds[pred][1] + delay)
            if i + 1 < m:
                h.addConstr(start[k][i + 1] >= start[k][i] + dur)
        h.addConstr(span >= start[k][m - 1] + dur - start[first[rank]][0])
    # before[(a, i, b, j)]: 1 when action (a, i) starts before (b, j) on their rank: 0, 1 or a
    # binary's expression.
    before = {}
    binaries = 0
    for rank in sorted(first):
        mine = [k for k in range(len(kinds)) if kinds[k][0] == rank]
        for x, a in enumerate(mine):
            for b in mine[x + 1:]:
                for i in range(m):
                    for j in range(m):
                        if a in ancestors[b] and j >= i:
                            before[(a, i, b, j)], before[(b, j, a, i)] = 1, 0
                        elif b in ancestors[a] and i >= j:
                            before[(b, j, a, i)], before[(a, i, b, j)] = 1, 0
                        else:
                            z = h.addBinary()
                            binaries += 1
                            h.addConstr(start[a][i] + kinds[a][1] <= start[b][j] + big * (1 - z))
                            h.addConstr(start[b][j] + kinds[b][1] <= start[a][i] + big * z)
                            before[(a, i, b, j)], before[(b, j, a, i)] = z, 1 - z
                # FIFO: (a, i) before (b, j) implies it is before (b, j + 1), and (a, i - 1)
                # before (b, j).
                for i in range(m):
                    for j in range(m):
                        e = before[(a, i, b, j)]
                        if isinstance(e, int):
                            continue
                        if j + 1 < m and not isinstance(before[(a, i, b, j + 1)], int):
                            h.addConstr(before[(a, i, b, j + 1)] >= e)
                        if i > 0 and not isinstance(before[(a, i - 1, b, j)], int):
                            h.addConstr(before[(a, i - 1, b, j)] >= e)
        for k in mine:
            if kinds[k][2] <= 0:
                continue
            for i in range(m):
                held, expr = kinds[k][2] * (i + 1), None
                for other in mine:
                    if other == k:
                        continue
                    for j in range(m):
                        e = before[(other, j, k, i)]
                        if isinstance(e, int):
                            held += kinds[other][2] * e
                        else:
                            expr = kinds[other][2] * e if expr is None else expr + kinds[other][2] * e
                if expr is not None:
                    h.addConstr(expr <= model["memory_limit"] - held)
                elif held > model["memory_limit"] + 1e-9:
                    return {"status": "Infeasible", "span": math.inf, "bound": math.inf,
                            "binaries": binaries, "seconds": 0.0}
    began = time.time()
    h.minimize(span)
    info = h.getInfo()
    status = h.modelStatusToString(h.getModelStatus())
    if status == "Time limit reached":
        status = "time limit"
    found = info.objective_function_value if info.primal_solution_status == 2 else math.inf
    bound = info.mip_dual_bound if status != "Infeasible" else math.inf
    if status == "Optimal":
        bound = found
    plan = None
    if found < math.inf:
        values = h.getSolution().col_value
        plan = [(values[start[k][i].index], k, i) for k in range(len(kinds)) for i in range(m)]
    return {"status": status, "span": found, "bound": bound, "binaries": binaries,
            "seconds": time.time() - began, "plan": plan}


def plan_text(model, plan):
    """The solver's plan, [(start, kind, microbatch)], in the zpipe-plan text form (core/plan.h):
    each rank's actions in the order of their starts."""
    kinds = kinds_of(model)
    lines = ["zpipe-plan v1", f"schedule {model['schedule']}",
             f"placement {model['placement']} ranks {model['pipeline']} chunks {model['chunks']} "
             f"microbatches {model['microbatches']}"]
    for r in range(model["pipeline"]):
        lines.append(f"rank {r}")
        for at, k, i in sorted(p for p in plan if kinds[p[1]][0] == r):
            name, stage = kinds[k][5]
            lines.append(f"{name} s{stage} mb{i}")
    return "\n".join(lines) + "\n"


def replay(binary, model_path, model, plan):
    """The plan's span as our validator and simulator see it (zpipe_replay_plan), or the reason
    they refuse it."""
    with tempfile.NamedTemporaryFile("w", suffix=".plan") as f:
        f.write(plan_text(model, plan))
        f.flush()
        done = subprocess.run([binary, model_path, f.name], capture_output=True, text=True)
    if done.returncode != 0:
        return None, (done.stderr or done.stdout).strip()
    return float(done.stdout.split()[1]), ""


def checked_replay(binary, path, model, plan, span, settled, who):
    """The plan's span as our validator and simulator see it (replay), or None when they refuse
    it, or take it at a span longer than `span` (a time limit may leave slack, which they take out:
    a shorter span is fine), or at any other span when `settled` (the solver's optimum); None is
    said on stderr, as `who`'s plan."""
    simulated, why = replay(binary, path, model, plan)
    if simulated is not None and abs(simulated - span) <= 1e-6 * max(1.0, simulated):
        return span
    if simulated is None or settled or simulated > span:
        said = f"spans {simulated}" if simulated is not None else f"is refused: {why}"
        print(f"mip_bound: {path}: {who}'s plan of span {span} {said} in our validator and "
              "simulator", file=sys.stderr)
        return None
    return simulated


def main():
    parser = argparse.ArgumentParser(
        description="the optimality table's rows solved by CP-SAT or HiGHS: a second certificate")
    parser.add_argument("models", help="the folder zpipe_optimal_table --models wrote")
    parser.add_argument("--solver", choices=["cp-sat", "highs"], default="cp-sat",
                        help="OR-Tools' CP-SAT (default) or HiGHS's MIP")
    parser.add_argument("--time-limit", type=float, default=30,
                        help="the solver's seconds per row (default 30; 0 with --lns: the "
                        "search alone, from the row's plan)")
    parser.add_argument("--workers", type=int, default=0,
                        help="CP-SAT's threads (default 0: one per core)")
    parser.add_argument("--rows", choices=["over", "unproven", "all"], default="over",
                        help="which rows: those whose default plan is over 1%% from our bound "
                        "(default), every row our solver did not prove, or all")
    parser.add_argument("--max-binaries", type=int, default=5000,
                        help="HiGHS: skip a row whose model would have more order binaries than "
                        "this (default 5000: skewed V-Half at p = 4, m = 16 has 8288, and after "
                        "60 s HiGHS's bound is 61 where the plan spans 108)")
    parser.add_argument("--lns", type=float, default=0, metavar="SECONDS",
                        help="CP-SAT: after the solve, a large-neighbourhood search from the "
                        "shorter of its plan and the row's for this many seconds a row "
                        "(lns_cpsat; default 0: none)")
    parser.add_argument("--lns-actions", type=int, default=0, metavar="N",
                        help="the search's windows hold this many actions on average (default "
                        "0: 30 a rank, 120 at p = 4 and 240 at p = 8)")
    parser.add_argument("--lns-step-limit", type=float, default=10, metavar="SECONDS",
                        help="CP-SAT's seconds for one window (default 10)")
    parser.add_argument("--verbose", action="store_true",
                        help="--lns: print each shorter plan the search finds, with its time")
    parser.add_argument("--check", action="store_true",
                        help="fail unless the solver agrees with every optimum our solver proved")
    parser.add_argument("--replay", metavar="ZPIPE_REPLAY_PLAN",
                        help="replay every plan the solver finds through our validator and "
                        "simulator (build/bench/zpipe_replay_plan) and fail unless they take it "
                        "at the solver's span (at most that span where the time limit ended it)")
    args = parser.parse_args()
    if args.lns > 0 and args.solver != "cp-sat":
        parser.error("--lns needs --solver cp-sat")
    paths = sorted(glob.glob(os.path.join(args.models, "*.json")))
    if not paths:
        sys.exit(f"mip_bound: no row models (*.json) in {args.models}: run "
                 "zpipe_optimal_table --models DIR first")
    if args.solver == "cp-sat":
        import ortools
        name = f"CP-SAT (OR-Tools {ortools.__version__})"
    else:
        import highspy
        name = f"HiGHS {highspy.Highs().version()}"
    print(f"{name}, {args.time_limit:g} s a row, rows: {args.rows}" +
          (f"; then a search with exact repairs, {args.lns:g} s a row (--lns)" if args.lns > 0
           else ""))
    print(f"{'costs':<9} {'sched':<7} {'p':>2} {'m':>3} {'span':>9} {'bound':>9} "
          f"{'mip':>9} {'mip_bound':>9} {'status':<11} {'gap':>8} {'binaries':>8} {'secs':>6}")
    print("(span: the plan in question, the default plan's or the reference's; bound: our "
          "solver's; mip: the least span the second solver found, at most that span, inf: none; "
          "gap: that span against the better bound; binaries: HiGHS's order binaries)")
    # Per cost model: rows, those whose optimum our bound proves and those within 1% of it, and
    # the same with the second solver (the optimum: its own, where it settles below the plan).
    tally = {}
    disagree = 0
    replayed = 0  # plans replayed through zpipe_replay_plan (--replay)
    shorter = {}  # per cost model, rows where the second solver found a plan shorter than `span`
    shorter_lns = {}  # the same for the large-neighbourhood search (--lns)
    skipped = []  # rows whose models are too large (HiGHS) or not integral (CP-SAT) to try
    for path in paths:
        with open(path) as f:
            model = json.load(f)
        counts = tally.setdefault(model["costs"], [0, 0, 0, 0, 0])
        gap = model["span"] / model["bound"] - 1
        counts[0] += 1
        counts[1] += model["optimal"]
        counts[2] += gap <= 0.01 + 1e-12
        wanted = (args.rows == "all" or (args.rows == "unproven" and not model["optimal"]) or
                  (args.rows == "over" and gap > 0.01 + 1e-12))
        row = (f"{model['costs']:<9} {model['schedule']:<7} {model['pipeline']:>2} "
               f"{model['microbatches']:>3} {model['span']:>9.4g} {model['bound']:>9.4g}")
        result = None
        if wanted and args.solver == "cp-sat" and args.time_limit <= 0:
            result = {"status": "not run", "span": math.inf, "bound": 0.0, "binaries": 0,
                      "seconds": 0.0, "plan": None}
        elif wanted and args.solver == "cp-sat":
            result = solve_cpsat(model, args.time_limit, args.workers)
        elif wanted and order_binaries(model) <= args.max_binaries:
            result = solve_highs(model, args.time_limit)
        if result is None:
            if wanted:
                skipped.append(f"{model['costs']} {model['schedule']} p{model['pipeline']} "
                               f"m{model['microbatches']}")
            counts[3] += model["optimal"]
            counts[4] += gap <= 0.01 + 1e-12
            continue
        # (Infeasible: the model disagrees with the plan, reported below; its bound says nothing.)
        bound = model["bound"] if result["status"] == "Infeasible" else \
            max(model["bound"], result["bound"])
        gap = model["span"] / bound - 1
        gap = 0.0 if abs(gap) < 1e-9 else gap  # (the solver's bound is the span, in whole units)
        # The optimum is known: our solver proved the plan optimal, or the second solver settled
        # (at the plan's span or below it), or its bound reached the plan's span.
        counts[3] += (model["optimal"] or result["status"] == "Optimal" or
                      bound >= model["span"] * (1 - 1e-9))
        counts[4] += gap <= 0.01 + 1e-12
        # The replay: the validator must take the solver's plan, and the simulator's span of it
        # is the plan's. Where the solver settled, that span must be its optimum (shorter: the
        # model forbids what the simulator allows, and its bound is not one). A plan from a run the
        # time limit ended may leave slack (an action later than it could start), which the
        # simulator's as-soon-as-possible run takes out: then its span is the shorter one.
        note = ""
        if args.replay and result["plan"] is not None:
            simulated = checked_replay(args.replay, path, model, result["plan"], result["span"],
                                       result["status"] == "Optimal", args.solver)
            replayed += 1
            if simulated is None:
                disagree += 1
            elif simulated != result["span"]:
                note = f" (its plan, {result['span']:.6g}, replays at {simulated:.6g})"
                result["span"] = simulated
        shorter[model["costs"]] = shorter.get(model["costs"], 0) + \
            (result["span"] < model["span"] * (1 - 1e-9))
        binaries = result["binaries"] if args.solver == "highs" else "-"
        print(f"{row} {result['span']:>9.4g} {result['bound']:>9.4g} {result['status']:<11} "
              f"{100 * gap:>7.2f}% {binaries:>8} {result['seconds']:>6.1f}{note}", flush=True)
        if args.lns > 0 and result["status"] not in ("Optimal", "Infeasible"):
            shortest = result["plan"] if result["plan"] is not None and \
                result["span"] < model["span"] else model["plan"]
            window = args.lns_actions or LNS_ACTIONS_PER_RANK * model["pipeline"]
            lns = lns_cpsat(model, shortest, args.lns, window, args.lns_step_limit,
                            args.workers, floor=bound,
                            log=(lambda text: print(f"    {text}", flush=True)) if args.verbose
                            else None)
            said = ""
            if args.replay:
                simulated = checked_replay(args.replay, path, model, lns["plan"], lns["span"],
                                           False, "the search")
                replayed += 1
                if simulated is None:
                    disagree += 1
                else:
                    lns["span"] = simulated
                    said = ", replayed"
            lns_gap = lns["span"] / bound - 1
            lns_gap = 0.0 if abs(lns_gap) < 1e-9 else lns_gap
            shorter_lns[model["costs"]] = shorter_lns.get(model["costs"], 0) + \
                (lns["span"] < model["span"] * (1 - 1e-9))
            print(f"  lns: {min(model['span'], result['span']):.6g} -> {lns['span']:.6g} "
                  f"({100 * lns_gap:.2f}% over the better bound; {lns['steps']} shorter plans in "
                  f"{lns['windows']} windows, {lns['seconds']:.0f} s{said})", flush=True)
        if result["status"] == "Infeasible":
            disagree += 1
            print(f"mip_bound: {path}: {args.solver} finds no plan as short as the plan's span "
                  f"{model['span']}: the model and the simulator disagree", file=sys.stderr)
        elif model["optimal"] and result["status"] == "Optimal" and \
                abs(result["span"] - model["span"]) > 1e-6 * max(1.0, model["span"]):
            disagree += 1
            print(f"mip_bound: {path}: our solver proved {model['span']} optimal, {args.solver} "
                  f"says {result['span']}", file=sys.stderr)
        elif args.check and model["optimal"] and result["status"] != "Optimal":
            disagree += 1
            print(f"mip_bound: {path}: {args.solver} did not settle in {args.time_limit:g} s "
                  f"({result['status']}); --check needs every row settled", file=sys.stderr)
    if skipped:
        why = (f"of more than {args.max_binaries} order binaries (--max-binaries)"
               if args.solver == "highs" else "whose costs do not scale to whole numbers")
        print(f"skipped {len(skipped)} rows {why}: {', '.join(skipped)}")
    for costs, (rows, proven, within, proven_either, within_either) in sorted(tally.items()):
        print(f"{costs}: {rows} rows: optimum proven on {proven}, with {args.solver} "
              f"{proven_either}; the span within 1% of the bound on {within}, of the better "
              f"bound {within_either}; {args.solver} found a shorter plan on "
              f"{shorter.get(costs, 0)}" +
              (f", its search (--lns) on {shorter_lns.get(costs, 0)}" if args.lns > 0 else ""))
    if args.replay:
        print(f"replayed {replayed} of {args.solver}'s plans through our validator and simulator"
              f"{'' if disagree else ': every span agrees'}")
    if disagree:
        sys.exit(1)


if __name__ == "__main__":
    main()
