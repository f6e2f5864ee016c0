"""scripts/bench model: a Python-defined model with uneven blocks, trained by `zpipe run --local`.

The model is a byte-level transformer written as a torch.nn.Sequential of 8 blocks: a large
embedding (an 8192 x 512 table, 4.2 M parameters, projected to the hidden size 128), six cheap
transformer blocks (examples/own-model/model.py's Block, hidden 128) and a large head (LayerNorm +
Linear(128, 8192), with the cross-entropy over the vocab). Per microbatch the head costs four to
six blocks and the embedding half of one, so the stages (and, on ZB-V, the ranks)
that a cut by block count makes are far apart.

Two tables, each from a few iterations of real `zpipe run --local -o json` jobs (coordinator and
p = 2 worker processes, one LibTorch thread each):

1. cuts: the same job with no `cuts` (the coordinator has a worker time F, B and W of every
   block, cuts where the slowest stage is fastest and plans from the measured costs) against
   `cuts` given as an even split by block count (unit-cost planning). ZB-V (S = 4 stages), then
   1F1B and ZB-2p (S = 2). On ZB-V a rank holds stages r and S-1-r, so its load is the sum of
   two stages; a third variant gives the cuts that balance those sums ("rank-balanced", chosen
   here by brute force from the per-block profile).
2. clip: the same ZB-V job, at the profiled cuts, with train.clip_grad_norm 0 (no cross-rank norm
   exchange) and 1.0 (every rank sends its squared gradient norm to rank 0 and waits for the total
   before its optimizer step), alternating.

The per-block costs come from the workers' own profiler: a first ZB-V job with one block per stage
(p = 4 for 8 blocks), cancelled once its layout is known. "stage max" and "rank max" are the
slowest stage and the slowest rank, F + B + W per microbatch summed from those block costs.
"iter" is the summary's median iteration time (iterations 2..N: first action start to last action
end, the worst rank; it leaves out the optimizer step and the norm exchange), "period" the median
time between consecutive iteration reports as they reach `zpipe run` (iterations 2..N), which
includes the step and any wait for the norm: throughput, and what shows the cost of clipping.
"cores" is the CPU time of zpipe run and its coordinator and workers over the run's wall time
(startup and profile included): near 2 (p workers) the ranks had a core each; well below, they
were competing for cores and the times measure total work more than pipeline balance. With
--repeats R every variant runs R times in rotating order and the table shows medians. The load
average before and after is printed: every number competes with anything else on the machine.

usage: model_bench.py [--zpipe BUILD/client/zpipe] [--iterations N] [--only cuts|clip]
                      [--schedules zb-v,1f1b,zb-2p] [--repeats R] [--vocab V] [--keep DIR]
"""
import argparse
import itertools
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "own-model"))

import model as own_model  # noqa: E402
import zeropipe  # noqa: E402

SEQ_LEN = 64
HIDDEN = 128
HEADS = 4
LAYERS = 6
EMBED_WIDE = 512
TEXT = "/usr/share/common-licenses/GPL-3"


class WideEmbed(nn.Module):
    """Token + position embedding in a wide space (vocab x wide), projected to the hidden size."""

    def __init__(self, vocab: int, seq_len: int, wide: int, hidden: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, wide)
        self.pos = nn.Embedding(seq_len, wide)
        self.proj = nn.Linear(wide, hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.size(1), device=ids.device)
        return self.proj(torch.nn.functional.gelu(self.tok(ids) + self.pos(positions)))


def build_model(vocab):
    torch.manual_seed(0)
    return nn.Sequential(WideEmbed(vocab, SEQ_LEN, EMBED_WIDE, HIDDEN),
                         *[own_model.Block(HIDDEN, HEADS) for _ in range(LAYERS)],
                         own_model.Head(HIDDEN, vocab))


def even_cuts(blocks, stages):
    """Cuts by block count: stage s starts at round(s * blocks / stages)."""
    return [int(math.floor(s * blocks / stages + 0.5)) for s in range(1, stages)]


def num_stages(schedule, p):
    return 2 * p if schedule in ("zb-v", "v-half", "v-min", "dualpipe-v") else p


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


class LocalProcessesError(RuntimeError):
    """zpipe run exited 3: its coordinator or workers did not come up."""


class Run:
    """One `zpipe -o json run JOB --local`: the JSON summary, the model layout (polled from the
    local coordinator with `zpipe status` while the job runs) and when each iteration's line
    arrived on stderr."""

    def __init__(self, zpipe, job_path, out_dir, timeout, stop_at_layout=False):
        self.zpipe = zpipe
        self.stop_at_layout = stop_at_layout
        self.address = None
        self.job_id = None
        self.layout = None
        self.iteration_times = {}  # iteration number (1-based) -> monotonic arrival time
        self.stderr_tail = []
        cmd = [zpipe, "-o", "json", "run", job_path, "--local", "--out", out_dir]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        stdout = []
        readers = [threading.Thread(target=self._read_stderr, daemon=True),
                   threading.Thread(target=lambda: stdout.append(self.proc.stdout.read()),
                                    daemon=True)]
        for t in readers:
            t.start()
        poller = threading.Thread(target=self._poll_layout, daemon=True)
        poller.start()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()  # zpipe run cancels the job and stops its processes
            self.proc.wait()
            raise RuntimeError(f"zpipe run {job_path} ran past {timeout} s:\n" +
                               "".join(self.stderr_tail[-20:]))
        for t in readers + [poller]:
            t.join(timeout=30)
        out = "".join(stdout)
        if stop_at_layout:
            if self.layout is None:
                raise RuntimeError(f"zpipe run {job_path}: no layout before it ended:\n" +
                                   "".join(self.stderr_tail[-40:]))
            return
        if self.proc.returncode == 3:
            raise LocalProcessesError(self.stderr_tail[-1].strip() if self.stderr_tail else "")
        if self.proc.returncode != 0:
            raise RuntimeError(f"zpipe run {job_path} exited {self.proc.returncode}:\n" +
                               "".join(self.stderr_tail[-40:]))
        self.summary = json.loads(out)
        if self.summary.get("state") != "succeeded":
            raise RuntimeError(f"{job_path}: {self.summary.get('state')}: "
                               f"{self.summary.get('reason')}")

    def _read_stderr(self):
        for line in self.proc.stderr:
            now = time.monotonic()
            self.stderr_tail = (self.stderr_tail + [line])[-60:]
            m = re.search(r"coordinator at (\S+?),", line)
            if m:
                self.address = m.group(1)
            m = re.match(r"submitted job (\S+)", line)
            if m:
                self.job_id = m.group(1)
            m = re.match(r"iteration (\d+)/(\d+):", line)
            if m:
                self.iteration_times.setdefault(int(m.group(1)), now)

    def _poll_layout(self):
        """Asks the coordinator for the job until its layout (cuts, measured stage costs) is
        known; the cuts are fixed before the first iteration starts."""
        while self.proc.poll() is None and self.layout is None:
            time.sleep(0.5)
            if self.address is None or self.job_id is None:
                continue
            try:
                st = subprocess.run([self.zpipe, "--coordinator", self.address, "-o", "json",
                                     "status", self.job_id], capture_output=True, text=True,
                                    timeout=20)
                if st.returncode != 0:
                    continue
                job = json.loads(st.stdout)
            except (subprocess.TimeoutExpired, ValueError):
                continue
            layout = job.get("layout") or {}
            if layout.get("cuts"):
                self.layout = layout
                if self.stop_at_layout:
                    self.proc.send_signal(signal.SIGINT)  # zpipe run cancels the job

    def period_s(self):
        """Median time between consecutive iteration reports, iterations 2..N."""
        its = sorted(self.iteration_times)
        gaps = [self.iteration_times[k] - self.iteration_times[k - 1] for k in its
                if k >= 2 and k - 1 in self.iteration_times]
        return statistics.median(gaps) if gaps else float("nan")

    def cuts(self):
        return [int(c) for c in (self.layout or {}).get("cuts", [])]

    def stage_costs_ms(self):
        """Measured F + B + W per microbatch of every stage (empty when nothing was profiled)."""
        return [float(st.get("forward_ms", 0)) + float(st.get("backward_ms", 0)) +
                float(st.get("weight_ms", 0)) for st in (self.layout or {}).get("stages", [])]


def stage_loads(block_ms, cuts):
    bounds = [0] + list(cuts) + [len(block_ms)]
    return [sum(block_ms[bounds[i]:bounds[i + 1]]) for i in range(len(bounds) - 1)]


def rank_loads(block_ms, cuts, schedule, p=2):
    """Per-rank F + B + W per microbatch: on V placements rank r holds stages r and S-1-r."""
    st = stage_loads(block_ms, cuts)
    if len(st) == 2 * p:
        return [st[r] + st[len(st) - 1 - r] for r in range(p)]
    return st


def rank_balanced_cuts(block_ms, stages, schedule, p=2):
    """The cuts that minimise the slowest rank (then the slowest stage), by brute force."""
    best = None
    for cuts in itertools.combinations(range(1, len(block_ms)), stages - 1):
        key = (max(rank_loads(block_ms, cuts, schedule, p)), max(stage_loads(block_ms, cuts)))
        if best is None or key < best[0]:
            best = (key, list(cuts))
    return best[1]


class Bench:
    def __init__(self, args, workdir):
        self.args = args
        self.dir = workdir
        net = build_model(args.vocab)
        self.blocks = len(net)
        self.params = sum(p.numel() for p in net.parameters())
        self.net = net
        self.model_path = zeropipe.export_model(net, os.path.join(workdir, "model.pt"),
                                                vocab=args.vocab)
        ids = zeropipe.bytes_to_tokens(TEXT)
        self.tokens_path = os.path.join(workdir, "train.bin")
        zeropipe.write_tokens(ids, self.tokens_path, dtype="uint16")
        self.count = 0

    def profile_blocks(self):
        """F + B + W per block (ms per microbatch) as the workers measure them: a ZB-V job with
        one block per stage (p = blocks / 2) and no cuts, cancelled as soon as its layout is
        known, i.e. right after the profile."""
        p = self.blocks // 2
        r = self.run("profile-blocks", "zb-v", p=p, microbatches=2 * p, stop_at_layout=True)
        costs = r.stage_costs_ms()
        if len(costs) != self.blocks:
            raise RuntimeError(f"profile: {len(costs)} stages for {self.blocks} blocks")
        return costs

    def run(self, name, schedule, cuts=None, clip=0.0, p=2, microbatches=None,
            stop_at_layout=False):
        spec = {
            "name": name,
            "model": {"torchscript": {"path": self.model_path}},
            "data": {"path": self.tokens_path, "dtype": "uint16", "seq_len": SEQ_LEN},
            "parallel": {"pipeline": p, "data": 1},
            "schedule": {"kind": schedule},
            "batch": {"microbatches": microbatches or self.args.microbatches,
                      "microbatch_size": self.args.microbatch_size},
            "train": {"iterations": self.args.iterations, "optimizer": "adamw", "lr": 1e-3,
                      "seed": 1, "clip_grad_norm": clip},
        }
        if cuts:
            spec["model"]["torchscript"]["cuts"] = list(cuts)
        self.count += 1
        out = os.path.join(self.dir, f"{self.count:02d}-{name}")
        os.makedirs(out, exist_ok=True)
        job = os.path.join(out, name + ".json")
        with open(job, "w") as f:
            json.dump(spec, f)
        print(f"  run {self.count}: {name} ({schedule}, cuts "
              f"{','.join(map(str, cuts)) if cuts else 'profiled'}, clip {clip:g}) ...",
              file=sys.stderr, flush=True)
        for attempt in range(6):
            t0 = time.monotonic()
            cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                r = Run(self.args.zpipe, job, out, timeout=self.args.timeout,
                        stop_at_layout=stop_at_layout)
                break
            except LocalProcessesError as e:
                # A binary being rebuilt in the build tree: wait and try again.
                if attempt == 5:
                    raise
                print(f"    the local processes did not come up ({e}); retrying in 20 s",
                      file=sys.stderr, flush=True)
                time.sleep(20)
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        # zpipe run reaps its coordinator and workers, so their CPU time counts here.
        r.cores = ((cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) /
                   max(time.monotonic() - t0, 1e-9))
        if stop_at_layout:
            print(f"    {time.monotonic() - t0:.1f} s, stage costs "
                  f"{', '.join(f'{c:.0f}' for c in r.stage_costs_ms())} ms", file=sys.stderr,
                  flush=True)
            return r
        print(f"    {time.monotonic() - t0:.1f} s, cuts {r.cuts()}, iter "
              f"{r.summary['iteration_s']:.3f} s, period {r.period_s():.3f} s, bubble "
              f"{r.summary['bubble']['measured']:.1%} (predicted "
              f"{r.summary['bubble']['predicted']:.1%}), {r.cores:.2f} cores used",
              file=sys.stderr, flush=True)
        return r


def fmt_cuts(cuts):
    return ",".join(map(str, cuts)) if cuts else "?"


def print_table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def cuts_table(bench, schedules, repeats, block_ms):
    """Per schedule: profiled cuts, even cuts and (V placements) the rank-balanced cuts, each run
    `repeats` times in rotating order. Returns the table and the profiled ZB-V cuts."""
    header = ["schedule", "variant", "cuts", "stage max", "rank max", "bubble pred",
              "bubble meas", "iter", "period", "period/profiled", "cores"]
    rows = []
    profiled_zbv = None
    for schedule in schedules:
        S = num_stages(schedule, 2)
        variants = [("profiled", None), ("even", even_cuts(bench.blocks, S))]
        if S == 4:
            variants.append(("rank-balanced", rank_balanced_cuts(block_ms, S, schedule)))
        results = {name: [] for name, _ in variants}
        for rep in range(repeats):
            k = rep % len(variants)
            for name, cuts in variants[k:] + variants[:k]:
                results[name].append(bench.run(f"{schedule}-{name}", schedule, cuts=cuts))
        base = statistics.median(r.period_s() for r in results["profiled"])
        for name, _ in variants:
            runs = results[name]
            cuts = runs[0].cuts()
            if name == "profiled":
                if schedule == "zb-v":
                    profiled_zbv = cuts
                if any(r.cuts() != cuts for r in runs):
                    cuts_text = "/".join(fmt_cuts(r.cuts()) for r in runs)
                else:
                    cuts_text = fmt_cuts(cuts)
            else:
                cuts_text = fmt_cuts(cuts)
            med = lambda f: statistics.median(f(r) for r in runs)  # noqa: E731
            period = med(lambda r: r.period_s())
            rows.append([schedule, name, cuts_text,
                         f"{max(stage_loads(block_ms, cuts)):.0f} ms",
                         f"{max(rank_loads(block_ms, cuts, schedule)):.0f} ms",
                         f"{med(lambda r: r.summary['bubble']['predicted']):.1%}",
                         f"{med(lambda r: r.summary['bubble']['measured']):.1%}",
                         f"{med(lambda r: r.summary['iteration_s']):.3f} s",
                         f"{period:.3f} s", f"{period / base:.2f}x",
                         f"{med(lambda r: r.cores):.2f}"])
    return header, rows, profiled_zbv


def norm_compute_ms(net, cuts, p=2):
    """What clipping adds to each rank's step besides the exchange: the executor's local squared
    norm (every gradient converted to float64, squared, summed), timed here on one thread for the
    parameters of each ZB-V rank (rank r holds stages r and S-1-r)."""
    bounds = [0] + list(cuts) + [len(net)]
    S = len(bounds) - 1
    out = []
    torch.set_num_threads(1)
    for r in range(p):
        grads = []
        for s in (r, S - 1 - r):
            for k in range(bounds[s], bounds[s + 1]):
                grads += [torch.randn_like(q) for q in net[k].parameters()]
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            total = 0.0
            for g in grads:
                total += g.to(torch.float64).pow(2).sum().item()
            times.append(time.perf_counter() - t0)
        out.append((sum(g.numel() for g in grads), statistics.median(times) * 1e3))
    return out


def clip_table(bench, cuts, repeats):
    header = ["clip_grad_norm", "cuts", "bubble meas", "iter", "period", "cores"]
    rows = []
    periods = {0.0: [], 1.0: []}
    iters = {0.0: [], 1.0: []}
    for rep in range(repeats):
        # Alternate the order so a drifting machine load does not favour one setting.
        order = (0.0, 1.0) if rep % 2 == 0 else (1.0, 0.0)
        for clip in order:
            r = bench.run(f"zb-v-clip{clip:g}", "zb-v", cuts=cuts, clip=clip)
            periods[clip].append(r.period_s())
            iters[clip].append(r.summary["iteration_s"])
            rows.append([f"{clip:g}", fmt_cuts(cuts), f"{r.summary['bubble']['measured']:.1%}",
                         f"{r.summary['iteration_s']:.3f} s", f"{r.period_s():.3f} s",
                         f"{r.cores:.2f}"])
    p0, p1 = statistics.median(periods[0.0]), statistics.median(periods[1.0])
    i0, i1 = statistics.median(iters[0.0]), statistics.median(iters[1.0])
    rows.append(["1.0 - 0", "", "", f"{(i1 - i0) * 1e3:+.0f} ms ({(i1 / i0 - 1):+.1%})",
                 f"{(p1 - p0) * 1e3:+.0f} ms ({(p1 / p0 - 1):+.1%})", ""])
    return header, rows


def find_zpipe():
    build = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
    return os.path.join(build, "client", "zpipe")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zpipe", default=find_zpipe())
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--microbatch-size", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--schedules", default="zb-v,1f1b,zb-2p")
    parser.add_argument("--only", choices=["cuts", "clip"])
    parser.add_argument("--repeats", type=int, default=1, help="runs per table row")
    parser.add_argument("--clip-repeats", type=int, default=2,
                        help="runs per clip setting (alternating order)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per zpipe run")
    parser.add_argument("--keep", help="keep the jobs, timelines and logs in this directory")
    args = parser.parse_args()
    args.zpipe = os.path.abspath(args.zpipe)
    if not os.access(args.zpipe, os.X_OK):
        sys.exit(f"model_bench: {args.zpipe} not found; build zpipe, zpipe-coordinator and "
                 "zpipe-worker (cmake --build BUILD_DIR --target zpipe zpipe-coordinator "
                 "zpipe-worker) or pass --zpipe")
    tmp = None
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        workdir = args.keep
    else:
        tmp = tempfile.TemporaryDirectory(prefix="zpipe-model-bench-")
        workdir = tmp.name
    try:
        bench = Bench(args, workdir)
        load0 = load_average()
        started = time.monotonic()
        print(f"model: {bench.blocks} blocks (wide embedding vocab {args.vocab} x {EMBED_WIDE} -> "
              f"{HIDDEN}, {LAYERS} transformer blocks hidden {HIDDEN}, head {HIDDEN} -> "
              f"{args.vocab}), {bench.params / 1e6:.1f} M parameters; p = 2, m = "
              f"{args.microbatches}, b = {args.microbatch_size}, seq {SEQ_LEN}, "
              f"{args.iterations} iterations per run, 1 thread per worker; {os.cpu_count()} "
              f"cores, load average {load0}")
        cuts = None
        if args.only in (None, "cuts"):
            block_ms = bench.profile_blocks()
            header, rows, cuts = cuts_table(bench, args.schedules.split(","), args.repeats,
                                            block_ms)
            print()
            print("== profiled (cost-balanced) cuts vs even cuts by block count")
            print("per-block F+B+W per microbatch as the worker profiles them: " +
                  ", ".join(f"{c:.0f}" for c in block_ms) + " ms")
            print_table(header, rows)
        if args.only in (None, "clip"):
            if not cuts:
                cuts = bench.run("zb-v-profile", "zb-v").cuts() or even_cuts(bench.blocks, 4)
            header, rows = clip_table(bench, cuts, args.clip_repeats)
            print()
            print("== global-norm gradient clipping on ZB-V (p = 2, S = 4): clip_grad_norm 0 "
                  "vs 1.0")
            print_table(header, rows)
            norms = norm_compute_ms(bench.net, cuts)
            print("local squared norm per step (float64, 1 thread): " + ", ".join(
                f"rank {r} {n / 1e6:.1f} M params {ms:.0f} ms" for r, (n, ms) in enumerate(norms)))
        print()
        print(f"(iter: median first-to-last action, iterations 2..{args.iterations}, no "
              f"optimizer step; period: median time between iteration reports, step and norm "
              f"exchange included; load average {load0} before, {load_average()} after, "
              f"{time.monotonic() - started:.0f} s)")
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
