"""One rank of the PyTorch side of `scripts/bench peer`: a torch.distributed.pipelining schedule
(Schedule1F1B, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV) over gloo
on 127.0.0.1, optionally with DDP over each stage module (d > 1). peer_bench.py starts p·d of these
with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; global rank = data_rank·p + pipeline_rank,
ZeroPipe's numbering.

usage: torch_rank.py CONFIG.json OUT_DIR
CONFIG (written by peer_bench.py): model (module path, build kwargs, initial state_dict file),
cuts (block index where each stage after the first begins, S = p·v stages), schedule, p, d, m, b,
seq_len, tokens file, iterations, optimizer settings.
Writes OUT_DIR/rank-R.json: per iteration the losses (ranks holding the last stage), this rank's
busy time and span, the start-to-start wall time, and the process's peak RSS (ru_maxrss); or
{"error": "<exception class>: <message>"} when the run raised.

How busy time is taken: each stage instance's forward_one_chunk, backward_one_chunk and
backward_weight_one_chunk and the schedule's _maybe_compute_loss (the last stage's loss, part of
its F) are wrapped so that every call records (start, end) on time.perf_counter. These are the
compute actions of every schedule class above (Schedule1F1B calls them from its own loop,
_PipelineScheduleRuntime from _perform_action); sends, receives and their waits fall outside them.
busy_r = the sum of those intervals in one step(); span_r = the first interval's start to the last
one's end, ZeroPipe's definition (worker/executor/executor.cc). With DDP the gradient all-reduce
runs inside the last backward (DDP's autograd hooks), so it counts as busy here, where ZeroPipe
counts its reductions as span but not busy.
"""
import importlib.util
import json
import os
import resource
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import zeropipe  # noqa: E402

SCHEDULES = {
    "1f1b": ("Schedule1F1B", "loop", 1),
    "interleaved-zb": ("ScheduleInterleavedZeroBubble", "loop", 2),
    "zbv": ("ScheduleZBVZeroBubble", "v", 2),
    "dualpipev": ("ScheduleDualPipeV", "v", 2),
}


def load_builder(path):
    spec = importlib.util.spec_from_file_location("peer_model_" + str(abs(hash(path))), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build


def stage_indices(placement, p, v, rank):
    """The stages pipeline rank `rank` holds, in PyTorch's (and ZeroPipe's) placement."""
    if placement == "v":
        return [rank, 2 * p - 1 - rank]
    return [rank + k * p for k in range(v)]


class Recorder:
    """(start, end) of every compute call; nested calls count once (the outer one)."""

    def __init__(self):
        self.intervals = []
        self.depth = 0

    def wrap(self, obj, name):
        inner = getattr(obj, name)

        def timed(*args, **kwargs):
            self.depth += 1
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.intervals.append((start, time.perf_counter()))

        setattr(obj, name, timed)


STEP = [0]  # the iteration being run (1-based), for the error report


def run(cfg, rank, world):
    p, d, m, b = cfg["p"], cfg["d"], cfg["m"], cfg["b"]
    pipeline_rank, data_rank = rank % p, rank // p
    torch.set_num_threads(cfg.get("threads", 1))
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    # Every rank creates every group, in the same order (new_group's contract).
    pp_groups = [dist.new_group(list(range(r * p, r * p + p))) for r in range(d)]
    dp_groups = [dist.new_group(list(range(k, p * d, p))) for k in range(p)] if d > 1 else None
    pp_group = pp_groups[data_rank]

    from torch.distributed import pipelining
    class_name, placement, v = SCHEDULES[cfg["schedule"]]
    schedule_class = getattr(pipelining, class_name)
    n_stages = p * v
    cuts = cfg["cuts"]
    if len(cuts) != n_stages - 1:
        raise ValueError(f"{n_stages} stages need {n_stages - 1} cuts, got {cuts}")

    net = load_builder(cfg["model"]["module"])(**cfg["model"]["kwargs"])
    net.load_state_dict(torch.load(cfg["model"]["state"]))
    blocks = list(net)
    bounds = [0] + cuts + [len(blocks)]
    device = torch.device("cpu")
    recorder = Recorder()
    stages, modules = [], []
    for s in stage_indices(placement, p, v, pipeline_rank):
        module = nn.Sequential(*blocks[bounds[s]:bounds[s + 1]])
        modules.append(module)
        if d > 1:
            module = nn.parallel.DistributedDataParallel(
                module, process_group=dp_groups[pipeline_rank])
        stage = pipelining.PipelineStage(module, s, n_stages, device, group=pp_group)
        for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
            recorder.wrap(stage, name)
        stages.append(stage)

    vocab = cfg["vocab"]

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))

    schedule = schedule_class(stages[0] if class_name == "Schedule1F1B" else stages, m,
                              loss_fn=loss_fn, scale_grads=True)
    recorder.wrap(schedule, "_maybe_compute_loss")

    params = [q for module in modules for q in module.parameters()]
    opt_cfg = cfg["optimizer"]
    if opt_cfg["kind"] == "adamw":
        opt = torch.optim.AdamW(params, lr=opt_cfg["lr"], betas=tuple(opt_cfg["betas"]),
                                eps=opt_cfg["eps"], weight_decay=opt_cfg["weight_decay"])
    else:
        opt = torch.optim.SGD(params, lr=opt_cfg["lr"], weight_decay=opt_cfg["weight_decay"])

    holds_first = any(s.is_first for s in stages)
    holds_last = any(s.is_last for s in stages)
    data = cfg["tokens"]
    iterations = []
    previous_start = None
    for t in range(cfg["iterations"]):
        STEP[0] = t + 1
        xs, ys = zip(*(zeropipe.batch(data, "uint16", cfg["seq_len"], t, data_rank, i, d, m, b,
                                      shuffle_seed=cfg.get("shuffle_seed"))
                       for i in range(m)))
        x, y = torch.cat(xs), torch.cat(ys)
        opt.zero_grad(set_to_none=True)
        recorder.intervals.clear()
        start = time.perf_counter()
        losses = [] if holds_last else None
        args = (x,) if holds_first else ()
        schedule.step(*args, target=y if holds_last else None, losses=losses)
        opt.step()
        end = time.perf_counter()
        busy = sum(e - s for s, e in recorder.intervals)
        first = min(s for s, _ in recorder.intervals)
        last = max(e for _, e in recorder.intervals)
        iterations.append({
            "loss": (sum(float(l) for l in losses) / len(losses)) if losses else None,
            "busy_s": busy, "span_s": last - first, "step_wall_s": end - start,
            "start_to_start_s": None if previous_start is None else start - previous_start,
            "actions": len(recorder.intervals)})
        previous_start = start
    # Replicas must hold the same weights after training if DDP averaged their gradients.
    checksum = float(sum(q.detach().double().sum() for q in params))
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": rank, "pipeline_rank": pipeline_rank, "data_rank": data_rank,
            "stages": [s.stage_index for s in stages], "iterations": iterations,
            "param_checksum": checksum,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def root_cause(e):
    """The innermost exception e wraps (the pipelining stage re-raises a bare RuntimeError
    around what the module raised)."""
    while e.__cause__ is not None:
        e = e.__cause__
    return e


def describe(e):
    """'Class: first line' of the exception, and of its root cause when it wraps one."""
    def line(x):
        text = next((t.strip() for t in str(x).splitlines() if t.strip()), "")
        return f"{type(x).__name__}: {text[:160]}"
    root = root_cause(e)
    return line(e) if root is e else f"{line(e)} <- {line(root)}"


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    out_dir = sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        result = run(cfg, rank, world)
    except Exception as e:  # reported in the table's row
        where = f" (iteration {STEP[0]})" if STEP[0] else " (setup)"
        result = {"rank": rank, "error": describe(e) + where,
                  "error_class": type(root_cause(e)).__name__ + where,
                  "traceback": traceback.format_exc(),
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0 if "error" not in result else 1)


if __name__ == "__main__":
    main()
