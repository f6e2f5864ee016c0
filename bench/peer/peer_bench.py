"""scripts/bench peer: ZeroPipe side by side with torch.distributed.pipelining, one table.

Every row trains one model twice from the same initial weights on the same token windows with the
same global batch, optimizer (AdamW, constant lr, no clipping on either side), p, d and m, on CPU
with one intra-op thread per rank:

- ZeroPipe: `zpipe -o json run JOB --local` (a local coordinator and p·d zpipe-worker processes)
  on the model exported to TorchScript, with no `cuts`, so a worker profiles every block and the
  plan is made from the measured F/B/W costs;
- PyTorch: p·d processes of torch_rank.py (gloo, 127.0.0.1), the eager nn.Sequential cut into the
  same stages (ZeroPipe's cuts; for the interleaved row, each of ZeroPipe's p stages halved), one
  PipelineStage per stage, DDP over each stage module when d > 1.

Schedule pairs (ZeroPipe <-> PyTorch):
  1f1b       <-> Schedule1F1B                    (p stages, one per rank)
  zb-2p      <-> ScheduleInterleavedZeroBubble   (ZeroPipe: p stages, memory 2p·M_F; PyTorch: 2p
                 stages in loop placement, its ZB-1p-style interleaved form. ZeroPipe has no
                 interleaved ZB; zb-2p is its zero-bubble schedule with the B/W split at about
                 the same activation memory, so the row compares the two ZB offerings, not one
                 algorithm)
  zb-v       <-> ScheduleZBVZeroBubble           (2p stages, V placement)
  dualpipe-v <-> ScheduleDualPipeV               (2p stages, V placement)

Columns (steady state = iterations 2..N on both sides, as `zpipe run` reports):
- tok/s: tokens of the global batch / iteration time, ZeroPipe's definition for both: the
  iteration time is the longest rank's first-compute-start to last-compute (or reduction) end,
  leaving out the optimizer step (tokens / sum of those times). ZeroPipe's is the summary's
  `tokens_per_s`. "ZP/PT" is their ratio.
- wall tok/s: the same tokens over the time from one iteration to the next, step included:
  ZeroPipe's is the median gap between consecutive iteration reports reaching `zpipe run`,
  PyTorch's the median start-to-start of step() on rank 0.
- bubble: 1 - Σ busy_r / (p·d·span), median over iterations; ZeroPipe's from the workers' own
  action timestamps (summary `bubble.measured`), PyTorch's from timestamps taken around every
  compute call of the stages (torch_rank.py's docstring says how).
- RSS MiB: peak resident set of each rank's process (the kernel's high-water mark: ru_maxrss of
  each PyTorch process, VmHWM of each zpipe-worker polled from /proc every 50 ms until it exits),
  ZeroPipe's per worker process, PyTorch's per rank.
- loss: the first iteration's loss of each and the largest relative difference over the first
  --compare iterations (default 3); "ok" when < 1e-5.

With --python, ZeroPipe also trains every row's model as a Python model (model.python: the
workers build the same nn.Module from its model.py in their embedded interpreter, at the
TorchScript run's cuts), twice: as written (compile: none, every F runs Python) and with
compile: trace (each block torch.jit.trace'd by the worker, F run in C++); a second table puts the
ZeroPipe paths side by side: tok/s and wall tok/s of each, the Python runs' ratios to TorchScript,
the same ratios by compute (busy) time, and how far the Python runs' losses are from the
TorchScript run's. The three runs go one after the other, so on a shared machine their ratios move
with the load: --rounds K runs the three K times, each round in another order (at the first
round's cuts), prints each round's ratios, and the table shows the run of median tok/s of each
path. Before the rows, zpipe_python_stage_bench
(bench/python_stage_bench.cc) times F, B and W of a trivial stage (y = x * w on [1, 8, 16]) from
each path: the per-action cost of the Python call; and for each model, its middle blocks as one
stage, the paths (TorchScript, Python, Python traced) alternating in one process: the compute
ratios, which load hits alike (the training runs run one after the other, so on a shared machine
their ratios move with the load).

usage: peer_bench.py --zpipe BUILD/client/zpipe [--quick] [--rows NAME,...] [--iterations N]
                     [--python [--rounds K]] [--json FILE] [--keep DIR] [--list]
"""
import argparse
import importlib.util
import inspect
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import zeropipe  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"
GPT = os.path.join(ROOT, "examples", "own-model", "model.py")
LLAMA = os.path.join(ROOT, "examples", "llama", "model.py")
PT_SCHEDULE = {"1f1b": "1f1b", "zb-2p": "interleaved-zb", "zb-v": "zbv", "dualpipe-v": "dualpipev"}
PT_NAME = {"1f1b": "Schedule1F1B", "interleaved-zb": "ScheduleInterleavedZeroBubble",
           "zbv": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV"}
TOLERANCE = 1e-5
# AdamW's eps: parity_test.py explains why 1e-8 would amplify float noise in gradients that are
# zero in exact arithmetic (attention's key bias) into full-size steps of random sign.
OPTIMIZER = {"kind": "adamw", "lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-6, "weight_decay": 0.01}


@dataclass
class Model:
    name: str
    module: str   # path of a model.py with build(**kwargs) -> nn.Sequential
    kwargs: dict
    seq_len: int
    vocab: int


@dataclass
class Row:
    name: str
    model: Model
    schedule: str  # ZeroPipe's name
    p: int
    d: int
    m: int
    b: int
    note: str = ""
    result: dict = field(default_factory=dict)


def gpt(name="gpt", seq_len=64, hidden=64, heads=4, layers=4):
    return Model(name, GPT, dict(vocab=256, seq_len=seq_len, hidden=hidden, heads=heads,
                                 layers=layers, seed=0), seq_len, 256)


def llama():
    """examples/llama/model.py's build(...), called with the arguments it accepts of ours."""
    want = dict(vocab=256, seq_len=64, hidden=64, heads=4, kv_heads=2, layers=4, seed=0)
    return Model("llama", LLAMA, want, 64, 256)


def rows(quick):
    g = gpt()
    # Attention-heavy: long sequences on a narrow model, so B (softmax and the score matmuls,
    # which have no weights) costs far more than W, and F less than B.
    attn = gpt("gpt-attn", seq_len=256, hidden=32, heads=8, layers=6)
    out = [Row("gpt-zbv-p2", g, "zb-v", 2, 1, 4, 2)]
    if quick:
        return out
    out = [Row("gpt-1f1b-p2", g, "1f1b", 2, 1, 4, 2),
           Row("gpt-zb-p2", g, "zb-2p", 2, 1, 4, 2)] + out + [
           Row("gpt-dualpipev-p2", g, "dualpipe-v", 2, 1, 4, 2),
           Row("llama-zbv-p2", llama(), "zb-v", 2, 1, 4, 2),
           Row("gpt-1f1b-p2-d2", g, "1f1b", 2, 2, 4, 2),
           Row("gpt-zbv-p2-d2", g, "zb-v", 2, 2, 4, 2),
           Row("attn-zbv-p4", attn, "zb-v", 4, 1, 8, 1,
               "unequal costs: B >> W, F < B")]
    return out


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_kwargs(model):
    spec = importlib.util.spec_from_file_location("peer_model_" + model.name, model.module)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    accepted = inspect.signature(module.build).parameters
    kwargs = {k: v for k, v in model.kwargs.items() if k in accepted}
    return module.build, kwargs


class Prepared:
    """A model's initial weights, as TorchScript (ZeroPipe) and as a state_dict (PyTorch)."""

    def __init__(self, model, workdir):
        build, self.kwargs = build_kwargs(model)
        net = build(**self.kwargs)
        self.blocks = len(net)
        base = os.path.join(workdir, model.name)
        self.state = base + ".init.pt"
        torch.save(net.state_dict(), self.state)
        self.torchscript = zeropipe.export_model(net, base + ".pt", vocab=model.vocab)


def token_file(workdir):
    """The GPL's bytes when the system has it, else a fixed pseudo-random stream."""
    path = os.path.join(workdir, "train.bin")
    if os.path.exists(TEXT):
        ids = zeropipe.bytes_to_tokens(TEXT)
    else:
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, 256, (40000,), generator=g).tolist()
    zeropipe.write_tokens(ids, path, dtype="uint16")
    return path


def descendants(root):
    """Pids of root's descendants (from /proc/*/stat's ppid)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def worker_hwm(pids, peaks):
    """Updates peaks[i] with the VmHWM (KiB) of every zpipe-worker among pids, i being the
    worker's index in `zpipe run --local` (its --name local-i; its log is worker-i.log)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0")]
            if "zpipe-worker" not in os.path.basename(argv[0]) or "--name" not in argv:
                continue
            index = int(argv[argv.index("--name") + 1].rsplit("-", 1)[1])
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peaks[index] = max(peaks.get(index, 0), int(line.split()[1]))
        except (OSError, ValueError, IndexError):
            pass


def worker_ranks(log_dir, p):
    """Worker index -> global rank (data_rank·p + pipeline_rank) from the workers' logs ("job
    ID: rank P/D of p=..."); empty when the logs do not say."""
    ranks = {}
    if not log_dir or not os.path.isdir(log_dir):
        return ranks
    for name in os.listdir(log_dir):
        m = re.fullmatch(r"worker-(\d+)\.log", name)
        if not m:
            continue
        with open(os.path.join(log_dir, name), errors="replace") as f:
            found = re.search(r": rank (\d+)/(\d+) of p=", f.read())
        if found:
            ranks[int(m.group(1))] = int(found.group(2)) * p + int(found.group(1))
    return ranks


def run_zeropipe(zpipe, row, model, tokens, iterations, out, timeout, name=None):
    """`model`: the job's model section."""
    spec = {
        "name": name or row.name,
        "model": model,
        "data": {"path": tokens, "dtype": "uint16", "seq_len": row.model.seq_len},
        "parallel": {"pipeline": row.p, "data": row.d},
        "schedule": {"kind": row.schedule},
        "batch": {"microbatches": row.m, "microbatch_size": row.b},
        "train": {"iterations": iterations, "optimizer": OPTIMIZER["kind"], "seed": 1,
                  "lr": OPTIMIZER["lr"], "betas": OPTIMIZER["betas"], "eps": OPTIMIZER["eps"],
                  "weight_decay": OPTIMIZER["weight_decay"], "clip_grad_norm": 0},
    }
    os.makedirs(out, exist_ok=True)
    job = os.path.join(out, spec["name"] + ".json")
    with open(job, "w") as f:
        json.dump(spec, f)
    # --keep-logs: the workers' logs say which worker got which rank (for RSS per rank).
    proc = subprocess.Popen([zpipe, "-o", "json", "run", job, "--local", "--out", out,
                             "--keep-logs"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    arrivals, tail, stdout, peaks, logs = {}, [], [], {}, []

    def read_stderr():
        for line in proc.stderr:
            tail.append(line)
            del tail[:-40]
            m = re.search(r"; logs in (\S+)", line)
            if m:
                logs.append(m.group(1))
            m = re.match(r"iteration (\d+)/\d+:", line)
            if m:
                arrivals.setdefault(int(m.group(1)), time.monotonic())

    readers = [threading.Thread(target=read_stderr, daemon=True),
               threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        worker_hwm(descendants(proc.pid), peaks)
        if time.monotonic() > deadline:
            proc.terminate()  # zpipe run cancels the job and stops its processes
            proc.wait()
            if logs:
                shutil.rmtree(logs[0], ignore_errors=True)
            return {"error": f"TimeoutError: zpipe run ran past {timeout} s"}
        time.sleep(0.05)
    for t in readers:
        t.join(timeout=30)
    ranks = worker_ranks(logs[0] if logs else None, row.p)
    if logs:
        shutil.rmtree(logs[0], ignore_errors=True)
    try:
        summary = json.loads("".join(stdout))
    except ValueError:
        return {"error": f"zpipe run exited {proc.returncode}: " + "".join(tail[-5:]).strip()}
    if summary.get("state") != "succeeded":
        return {"error": f"{summary.get('state')}: {summary.get('reason')}"}
    gaps = [arrivals[k] - arrivals[k - 1] for k in sorted(arrivals) if k >= 3 and k - 1 in arrivals]
    tokens_per_iteration = row.d * row.m * row.b * row.model.seq_len
    return {"tokens_per_s": summary["tokens_per_s"],
            "wall_tokens_per_s": tokens_per_iteration / statistics.median(gaps) if gaps else None,
            "bubble": summary["bubble"]["measured"],
            "busy_s": sum(r["busy_s"] for r in summary["ranks"]),
            "iteration_s": summary["iteration_s"],
            "bubble_predicted": summary["bubble"]["predicted"],
            "losses": summary["losses"],
            # By global rank when the logs said which worker held it, else by worker index.
            "rss_mib": [peaks[i] / 1024 for i in sorted(peaks, key=lambda i: ranks.get(i, i))],
            "rss_by_rank": len(ranks) == len(peaks),
            "cuts": [int(c) for c in (summary.get("layout") or {}).get("cuts", [])],
            "stages_ms": [(s["forward_ms"], s["backward_ms"], s["weight_ms"])
                          for s in (summary.get("layout") or {}).get("stages", [])]}


# The trivial stage of the per-action benchmark: embedding, y = x * w, head.
TRIVIAL_MODEL = """import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x * self.w


def build_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(32, 16), Scale(), nn.Linear(16, 32))
"""


def stage_overhead(zpipe, workdir, timeout):
    """Runs zpipe_python_stage_bench (beside zpipe's build) on the trivial model; its lines and its
    JSON, or an error."""
    build = os.path.dirname(os.path.dirname(zpipe))
    binary = os.path.join(build, "bench", "zpipe_python_stage_bench")
    if not os.access(binary, os.X_OK):
        return {"error": f"{binary} not built (cmake --build {build} --target "
                         "zpipe_python_stage_bench)"}
    model_py = os.path.join(workdir, "trivial_model.py")
    with open(model_py, "w") as f:
        f.write(TRIVIAL_MODEL)
    spec = importlib.util.spec_from_file_location("trivial_model", model_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model_pt = zeropipe.export_model(module.build_model(), os.path.join(workdir, "trivial.pt"),
                                     vocab=32)
    done = subprocess.run([binary, "--python", model_py, "--torchscript", model_pt],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode != 0:
        return {"error": f"zpipe_python_stage_bench exited {done.returncode}: "
                         f"{done.stderr.strip()[-2000:]}"}
    lines = done.stdout.strip().splitlines()
    return {"lines": lines[:-1], "json": json.loads(lines[-1])}


def stage_compute(zpipe, model, prep, batch, timeout):
    """zpipe_python_stage_bench on a row's model: its middle blocks (all but the first and last)
    as one stage, F, B and W from each path alternating in one process, on a job-like thread.
    Unlike the training runs, which run one path after the other, load hits all alike, so this
    is the ratio to trust on a busy machine. {kind: (F, B, W) p50 us} for kinds torchscript,
    python and traced (compile: trace), or an error."""
    binary = os.path.join(os.path.dirname(os.path.dirname(zpipe)), "bench",
                          "zpipe_python_stage_bench")
    if not os.access(binary, os.X_OK):
        return {"error": f"{binary} not built"}
    done = subprocess.run([binary, "--python", model.module, "--torchscript", prep.torchscript,
                           "--factory", "build", "--args", json.dumps(prep.kwargs),
                           "--seq", str(model.seq_len), "--batch", str(batch),
                           "--blocks", f"1:{prep.blocks - 1}", "--reps", "200"],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode != 0:
        return {"error": f"zpipe_python_stage_bench exited {done.returncode}: "
                         f"{done.stderr.strip()[-500:]}"}
    p50 = json.loads(done.stdout.strip().splitlines()[-1])
    return {kind: tuple(p50[f"{kind}_{a}_p50_us"] for a in "FBW")
            for kind in ("torchscript", "python", "traced")}


def stage_compute_line(name, blocks, result):
    if "error" in result:
        return f"{name}: stage compute: {result['error']}"
    ts, py, tr = result["torchscript"], result["python"], result["traced"]

    def ms(values):
        return "/".join(f"{v / 1e3:.2f}" for v in values)

    return (f"{name}: blocks 1..{blocks - 2} as one stage, one process, p50 F/B/W ms: "
            f"TorchScript {ms(ts)}, Python {ms(py)}, Python traced {ms(tr)}; throughput (F+B+W) "
            f"over TorchScript's: Python {sum(ts) / sum(py):.3f}x (F alone {ts[0] / py[0]:.3f}x), "
            f"traced {sum(ts) / sum(tr):.3f}x (F alone {ts[0] / tr[0]:.3f}x)")


def python_table(rows, compare):
    """One line per row and Python run: compile none ("zpy") and trace ("zpt")."""
    header = ["row", "schedule", "p", "d", "m", "compile", "tok/s TorchScript", "tok/s Python",
              "Py/TS", "wall tok/s TorchScript", "wall tok/s Python", "Py/TS by busy time",
              f"max rel loss diff it1-{compare}"]
    lines = []
    for row in rows:
        ts = row.result.get("zp", {})
        for key, mode in (("zpy", "none"), ("zpt", "trace")):
            py = row.result.get(key, {})
            cells = [row.name, row.schedule, row.p, row.d, row.m, mode]
            if "error" in ts or "error" in py or not py:
                cells += ["failed (below)" if "error" in ts else f"{ts['tokens_per_s']:.0f}",
                          "failed (below)" if py else "not run"] + [""] * 5
            else:
                wall = [f"{v:.0f}" if v is not None else "—"
                        for v in (ts.get("wall_tokens_per_s"), py.get("wall_tokens_per_s"))]
                cells += [f"{ts['tokens_per_s']:.0f}", f"{py['tokens_per_s']:.0f}",
                          f"{py['tokens_per_s'] / ts['tokens_per_s']:.3f}x"] + wall + [
                          f"{ts['busy_s'] / py['busy_s']:.3f}x",
                          f"{compare_losses(py, ts, compare):.1e}"]
            lines.append([str(c) for c in cells])
    return header, lines


def python_rounds(zpipe, row, prep, zp, tokens, iterations, out, args):
    """The Python runs of a row beside its TorchScript run `zp` (the first round's), over
    args.rounds rounds at zp's cuts, the order rotated each round; prints each round's ratios.
    (TorchScript, Python, Python traced): each path's run of median tok/s."""
    python = {"file": row.model.module, "factory": "build", "args": prep.kwargs,
              "cuts": zp["cuts"]}
    paths = [("zp", {"torchscript": {"path": prep.torchscript, "cuts": zp["cuts"]}}, ""),
             ("zpy", {"python": python}, "-python"),
             ("zpt", {"python": dict(python, compile="trace")}, "-python-trace")]
    runs = {"zp": [zp], "zpy": [], "zpt": []}
    for r in range(args.rounds):
        order = paths[r % 3:] + paths[:r % 3]
        got = {}
        for key, model, suffix in order:
            if r == 0 and key == "zp":
                got[key] = zp  # the run that found the cuts
            else:
                got[key] = run_zeropipe(zpipe, row, model, tokens, iterations,
                                        os.path.join(out, f"zeropipe{suffix}-{r}"),
                                        args.timeout, name=f"{row.name}{suffix}-{r}")
                runs[key].append(got[key])
        if args.rounds > 1 and all("error" not in v for v in got.values()):
            ts = got["zp"]["tokens_per_s"]
            print(f"{row.name} round {r + 1} ({', '.join(k for k, _, _ in order)}; load "
                  f"{load_average()}): tok/s TorchScript {ts:.0f}, Python "
                  f"{got['zpy']['tokens_per_s']:.0f} ({got['zpy']['tokens_per_s'] / ts:.3f}x), "
                  f"traced {got['zpt']['tokens_per_s']:.0f} "
                  f"({got['zpt']['tokens_per_s'] / ts:.3f}x)", flush=True)

    def median_run(results):
        ok = sorted((v for v in results if "error" not in v), key=lambda v: v["tokens_per_s"])
        return ok[(len(ok) - 1) // 2] if ok else (results[0] if results else {})

    return tuple(median_run(runs[key]) for key in ("zp", "zpy", "zpt"))


def pytorch_cuts(row, zp_cuts, blocks):
    """ZeroPipe's cuts when the stage counts match; for the interleaved row each of ZeroPipe's p
    stages is halved (by block count), giving 2p stages."""
    if row.schedule != "zb-2p":
        return zp_cuts
    bounds = [0] + zp_cuts + [blocks]
    cuts = []
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if hi - lo < 2:
            raise ValueError(f"stage {k} holds {hi - lo} block: cannot halve it for the "
                             "interleaved schedule")
        cuts += [lo + (hi - lo) // 2] + ([hi] if k < len(bounds) - 2 else [])
    return cuts


def run_pytorch(row, prep, tokens, iterations, cuts, out, timeout):
    os.makedirs(out, exist_ok=True)
    cfg = {"model": {"module": row.model.module, "kwargs": prep.kwargs, "state": prep.state},
           "cuts": cuts, "schedule": PT_SCHEDULE[row.schedule], "p": row.p, "d": row.d,
           "m": row.m, "b": row.b, "seq_len": row.model.seq_len, "vocab": row.model.vocab,
           "tokens": tokens, "iterations": iterations, "optimizer": OPTIMIZER, "threads": 1}
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    world = row.p * row.d
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = []
    for rank in range(world):
        log = open(os.path.join(out, f"rank-{rank}.log"), "w")
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "torch_rank.py"), cfg_path, out],
            env=dict(env, RANK=str(rank)), stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    failed_at = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now  # the others may wait forever on a peer that is gone
        if now > deadline or (failed_at is not None and now > failed_at + 10):
            for p in procs:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.05)
    for p in procs:
        p.wait()
    results = []
    for rank in range(world):
        try:
            with open(os.path.join(out, f"rank-{rank}.json")) as f:
                results.append(json.load(f))
        except OSError:
            results.append({"rank": rank, "error": "no result (killed: a peer failed or the run "
                            f"ran past {timeout} s)"})
    errors = [r for r in results if "error" in r]
    if errors:
        first = next((r for r in errors if "traceback" in r), errors[0])
        return {"error": first["error"], "error_class": first.get("error_class", "error"),
                "traceback": first.get("traceback", "")}
    return summarize_pytorch(row, results)


def summarize_pytorch(row, results):
    n = len(results[0]["iterations"])
    steady = range(1 if n > 1 else 0, n)
    world = len(results)
    durations, bubbles = [], []
    for t in steady:
        span = max(r["iterations"][t]["span_s"] for r in results)
        busy = sum(r["iterations"][t]["busy_s"] for r in results)
        durations.append(span)
        bubbles.append(1 - busy / (world * span))
    tokens_per_iteration = row.d * row.m * row.b * row.model.seq_len
    losses = []
    for t in range(n):
        replicas = [r["iterations"][t]["loss"] for r in results
                    if r["iterations"][t]["loss"] is not None]
        losses.append(sum(replicas) / len(replicas))
    walls = [results[0]["iterations"][t]["start_to_start_s"] for t in range(2, n)]
    checksums = {}
    for r in results:
        checksums.setdefault(r["pipeline_rank"], []).append(r["param_checksum"])
    replicas_agree = all(max(v) - min(v) <= 1e-6 * max(1.0, abs(max(v)))
                         for v in checksums.values())
    return {"tokens_per_s": tokens_per_iteration * len(durations) / sum(durations),
            "wall_tokens_per_s": tokens_per_iteration / statistics.median(walls) if walls else None,
            "bubble": statistics.median(bubbles), "losses": losses,
            "busy_s": statistics.median(sum(r["iterations"][t]["busy_s"] for r in results)
                                        for t in steady),
            "iteration_s": statistics.median(durations),
            "rss_mib": [r["maxrss_kib"] / 1024 for r in sorted(results, key=lambda r: r["rank"])],
            "replicas_agree": replicas_agree}


def compare_losses(zp, pt, k):
    pairs = list(zip(zp["losses"], pt["losses"]))[:k]
    return max(abs(a - b) / abs(b) for a, b in pairs) if pairs else float("nan")


def fmt_rss(values):
    return "/".join(f"{v:.0f}" for v in values)


def table(rows, compare):
    header = ["row", "ZeroPipe <-> PyTorch", "p", "d", "m", "tok/s ZP", "tok/s PT", "ZP/PT",
              "wall tok/s ZP", "wall tok/s PT", "bubble ZP", "bubble PT", "RSS MiB ZP",
              "RSS MiB PT", "loss it1 ZP", "loss it1 PT", f"max rel diff it1-{compare}"]
    lines = []
    for row in rows:
        zp, pt = row.result.get("zp", {}), row.result.get("pt", {})
        cells = [row.name, f"{row.schedule} <-> {PT_NAME[PT_SCHEDULE[row.schedule]]}",
                 row.p, row.d, row.m]

        def num(side, key, f):
            v = side.get(key)
            return f(v) if v is not None else "—"

        if "error" in zp:
            cells += ["ZeroPipe failed (below)"] + [""] * 11
        elif "error" in pt:
            cells += [f"{zp['tokens_per_s']:.0f}", f"failed: {pt.get('error_class', 'error')}", "",
                      num(zp, "wall_tokens_per_s", "{:.0f}".format), "",
                      f"{zp['bubble']:.1%}", "", fmt_rss(zp["rss_mib"]), "",
                      f"{zp['losses'][0]:.6f}", "", ""]
        else:
            diff = compare_losses(zp, pt, compare)
            verdict = "ok" if diff < TOLERANCE else "DIFFERS"
            if pt.get("replicas_agree") is False:
                verdict += " (PT replicas diverged)"
            cells += [f"{zp['tokens_per_s']:.0f}", f"{pt['tokens_per_s']:.0f}",
                      f"{zp['tokens_per_s'] / pt['tokens_per_s']:.2f}x",
                      num(zp, "wall_tokens_per_s", "{:.0f}".format),
                      num(pt, "wall_tokens_per_s", "{:.0f}".format),
                      f"{zp['bubble']:.1%}", f"{pt['bubble']:.1%}", fmt_rss(zp["rss_mib"]),
                      fmt_rss(pt["rss_mib"]), f"{zp['losses'][0]:.6f}",
                      f"{pt['losses'][0]:.6f}", f"{diff:.1e} {verdict}"]
        lines.append([str(c) for c in cells])
    return header, lines


def print_markdown(header, lines):
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in lines:
        print("| " + " | ".join(cells) + " |")


def find_zpipe():
    build = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
    return os.path.join(build, "client", "zpipe")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zpipe", default=find_zpipe())
    parser.add_argument("--quick", action="store_true",
                        help="one row (GPT ZB-V p = 2), 4 iterations: a smoke run of a minute")
    parser.add_argument("--rows", help="comma-separated row names (see --list)")
    parser.add_argument("--list", action="store_true", help="print the row names and exit")
    parser.add_argument("--iterations", type=int, help="per run (default 20; --quick 4)")
    parser.add_argument("--compare", type=int, default=3,
                        help="iterations whose losses must agree (default 3)")
    parser.add_argument("--pytorch-only", action="store_true",
                        help="skip ZeroPipe; PyTorch cuts by block count (to try the PyTorch side)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per run")
    parser.add_argument("--python", action="store_true",
                        help="also train each row as a Python model (model.python) and time the "
                             "Python stage call; a second table")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --python: run ZeroPipe's three runs of a row (TorchScript, "
                             "Python, Python traced) K times, the order rotated each round")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--keep", help="keep jobs, logs and timelines in this directory")
    args = parser.parse_args()
    selected = rows(args.quick and not args.rows)
    if args.rows:
        by_name = {r.name: r for r in rows(False)}
        unknown = [n for n in args.rows.split(",") if n not in by_name]
        if unknown:
            sys.exit(f"peer_bench: unknown row(s) {', '.join(unknown)}; --list shows them")
        selected = [by_name[n] for n in args.rows.split(",")]
    if args.list:
        for r in rows(False):
            print(f"{r.name}: {r.model.name} {r.schedule} p={r.p} d={r.d} m={r.m} b={r.b}")
        return
    iterations = args.iterations or (4 if args.quick else 20)
    zpipe = os.path.abspath(args.zpipe)
    if not args.pytorch_only and not os.access(zpipe, os.X_OK):
        sys.exit(f"peer_bench: {zpipe} not found; build zpipe, zpipe-coordinator and "
                 "zpipe-worker or pass --zpipe")
    tmp = None
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        workdir = args.keep
    else:
        tmp = tempfile.TemporaryDirectory(prefix="zpipe-peer-bench-")
        workdir = tmp.name
    try:
        tokens = token_file(workdir)
        load0, started = load_average(), time.monotonic()
        print(f"peer: {len(selected)} row(s), {iterations} iterations per run, 1 thread per "
              f"rank, torch {torch.__version__}, {os.cpu_count()} cores, load average {load0}",
              flush=True)
        overhead = None
        if args.python and not args.pytorch_only:
            overhead = stage_overhead(zpipe, workdir, args.timeout)
            for line in overhead.get("lines", [overhead.get("error", "")]):
                print(f"python stage call: {line}", flush=True)
        prepared, computed = {}, {}
        for row in selected:
            if row.model.module == LLAMA and not os.path.exists(LLAMA):
                row.result = {"zp": {"error": f"{os.path.relpath(LLAMA, ROOT)} not found"},
                              "pt": {}}
                print(f"{row.name}: skipped, {LLAMA} not found", flush=True)
                continue
            if row.model.name not in prepared:
                prepared[row.model.name] = Prepared(row.model, workdir)
            prep = prepared[row.model.name]
            if args.python and not args.pytorch_only and row.model.name not in computed:
                computed[row.model.name] = stage_compute(zpipe, row.model, prep, row.b,
                                                         args.timeout)
                print(stage_compute_line(row.model.name, prep.blocks,
                                         computed[row.model.name]), flush=True)
            out = os.path.join(workdir, row.name)
            t0 = time.monotonic()
            if args.pytorch_only:
                stages = row.p * (1 if row.schedule == "1f1b" else 2)
                zp = {"cuts": [round(k * prep.blocks / stages) for k in range(1, stages)]}
                cuts = zp["cuts"]
            else:
                zp = run_zeropipe(zpipe, row, {"torchscript": {"path": prep.torchscript}}, tokens,
                                  iterations, os.path.join(out, "zeropipe"), args.timeout)
                cuts = pytorch_cuts(row, zp.get("cuts", []), prep.blocks) if "error" not in zp \
                    else None
            zpy, zpt = {}, {}
            if args.python and not args.pytorch_only and "error" not in zp:
                zp, zpy, zpt = python_rounds(zpipe, row, prep, zp, tokens, iterations, out, args)
            t1 = time.monotonic()
            pt = run_pytorch(row, prep, tokens, iterations, cuts, os.path.join(out, "pytorch"),
                             args.timeout) if cuts is not None else {"error": "not run"}
            row.result = {"zp": zp, "pt": pt, "pt_cuts": cuts}
            if zpy:
                row.result["zpy"] = zpy
            if zpt:
                row.result["zpt"] = zpt
            print(f"{row.name}: ZeroPipe {t1 - t0:.0f} s (cuts {zp.get('cuts')}), PyTorch "
                  f"{time.monotonic() - t1:.0f} s (cuts {cuts})"
                  + (f"; PyTorch: {pt['error']}" if "error" in pt else ""), flush=True)
            if "traceback" in pt and os.environ.get("PEER_VERBOSE"):
                print(pt["traceback"], file=sys.stderr)
        load1 = load_average()
        print()
        if not args.pytorch_only:
            print_markdown(*table(selected, args.compare))
        if args.python and not args.pytorch_only:
            print()
            print("ZeroPipe's Python path (model.python) beside its TorchScript path, same cuts:")
            print()
            print_markdown(*python_table(selected, args.compare))
            print()
            for name, result in computed.items():
                print(stage_compute_line(name, prepared[name].blocks, result))
            print("(Py/TS by busy time: the ranks' summed compute time per iteration, "
                  "TorchScript's over Python's; the one-process lines alternate the paths, so "
                  "load hits both alike: the ratio to trust on a shared machine)")
        else:
            for row in selected:
                print(row.name, json.dumps(row.result["pt"])[:2000])
        for row in selected:
            for side, name in (("zp", "ZeroPipe"), ("zpy", "ZeroPipe (Python model)"),
                               ("zpt", "ZeroPipe (Python model, compile: trace)"),
                               ("pt", "PyTorch")):
                error = row.result.get(side, {}).get("error")
                if error and error != "not run":
                    print(f"{row.name}: {name} failed: {error}")
        print()
        print(f"({os.cpu_count()} cores; load average {load0} before, {load1} after; "
              f"{time.monotonic() - started:.0f} s. tok/s: tokens / first-compute-to-last-"
              "compute time of the slowest rank, optimizer step left out, iterations 2..N; "
              "wall tok/s: step included; bubble 1 - busy/(ranks x span); RSS: peak per rank "
              "process)")
        for row in selected:
            zp = row.result.get("zp", {})
            if zp.get("stages_ms") and row.note:
                print(f"{row.name} ({row.note}): ZeroPipe's measured F/B/W per stage, ms: " +
                      "  ".join(f"{f:.1f}/{b:.1f}/{w:.1f}" for f, b, w in zp["stages_ms"]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump([{"row": r.name, "schedule": r.schedule,
                            "pytorch": PT_NAME[PT_SCHEDULE[r.schedule]], "p": r.p, "d": r.d,
                            "m": r.m, "b": r.b, "zeropipe": r.result.get("zp"),
                            "torch": r.result.get("pt"), "pt_cuts": r.result.get("pt_cuts"),
                            "zeropipe_python": r.result.get("zpy"),
                            "zeropipe_python_trace": r.result.get("zpt"),
                            "loss_max_rel_diff": compare_losses(r.result["zp"], r.result["pt"],
                                                                args.compare)
                            if "losses" in r.result.get("zp", {}) and
                            "losses" in r.result.get("pt", {}) else None}
                           for r in selected] +
                          ([{"python_stage_call": overhead}] if overhead else []) +
                          ([{"python_stage_compute": computed}] if computed else []), f,
                          indent=1)
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
