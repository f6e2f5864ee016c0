"""`zpipe plan --format torch-csv` run by PyTorch's own pipeline runtime.

ZeroPipe plans (the cost-aware ZB-V above all, also ZB-2p, interleaved 1F1B and 1F1B; p = 2,
unequal F/B/W costs) are written with `zpipe plan --format torch-csv`, loaded into
torch.distributed.pipelining's _PipelineScheduleRuntime (`_load_csv`, format "compute_only") and
trained for a few SGD steps by two processes over gloo on the CPU. Each rank builds the stages
PyTorch's own placement style gives it ("v" for ZB-V, as for ScheduleZBVZeroBubble; "loop"
otherwise), not the ones the CSV names, so a wrong stage number, a wrong action letter or an order
PyTorch cannot run fails the test. Every microbatch loss, every gradient and the final weights
must equal a plain single-process PyTorch loop on the same model and data within 1e-5.

usage: runtime_test.py --zpipe BUILD/client/zpipe [-v] [TorchCsvRuntimeTest.test_NAME]
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import traceback
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

ZPIPE = None
PIPELINE = 2
MICROBATCHES = 4
MICROBATCH_SIZE = 2
WIDTH = 6
STEPS = 3
LR = 0.1
TOLERANCE = 1e-5
COST = "f=3,b=4,w=2,comm=0.5"  # unequal F/B/W, so the cost-aware plans differ from the unit ones

# name -> (schedule, stages per rank, PyTorch placement style)
CASES = {
    "zb-v": ("zb-v", 2, "v"),
    "zb-2p": ("zb-2p", 1, "loop"),
    "interleaved": ("interleaved", 2, "loop"),
    "1f1b": ("1f1b", 1, "loop"),
}


def build_model(num_stages):
    """The whole model: one Linear + Tanh block per stage, the same weights in every process."""
    torch.manual_seed(0)
    return torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh())
        for _ in range(num_stages))


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    n = MICROBATCHES * MICROBATCH_SIZE
    return torch.randn(n, WIDTH, generator=g), torch.randn(n, WIDTH, generator=g)


def reference(num_stages):
    """Plain PyTorch: per step, the microbatch losses, the gradients of their mean, then SGD."""
    blocks = build_model(num_stages)
    model = torch.nn.Sequential(*blocks)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, grads = [], []
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        mb_losses = [torch.nn.functional.mse_loss(model(xm), ym)
                     for xm, ym in zip(x.chunk(MICROBATCHES), y.chunk(MICROBATCHES))]
        torch.stack(mb_losses).mean().backward()
        losses.append([l.item() for l in mb_losses])
        grads.append({s: [p.grad.clone() for p in blocks[s].parameters()]
                      for s in range(num_stages)})
        opt.step()
    params = {s: [p.detach().clone() for p in blocks[s].parameters()] for s in range(num_stages)}
    return {"losses": losses, "grads": grads, "params": params}


def run_case(rank, csv_path, num_stages, style):
    """Trains on this rank's stages with the schedule in `csv_path`; returns what it saw."""
    mapping = generate_stage_to_rank_mapping(PIPELINE, num_stages, style=style)
    stage_ids = [s for s in range(num_stages) if mapping[s] == rank]
    blocks = build_model(num_stages)
    stages = [PipelineStage(blocks[s], s, num_stages, torch.device("cpu")) for s in stage_ids]
    schedule = _PipelineScheduleRuntime(stages, n_microbatches=MICROBATCHES,
                                        loss_fn=torch.nn.functional.mse_loss, scale_grads=True)
    schedule._load_csv(csv_path)
    params = [p for s in stage_ids for p in blocks[s].parameters()]
    opt = torch.optim.SGD(params, lr=LR)
    out = {"losses": [], "grads": [], "params": {}}
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        losses = []
        args = (x,) if 0 in stage_ids else ()
        target = y if num_stages - 1 in stage_ids else None
        schedule.step(*args, target=target, losses=losses)
        out["losses"].append([l.item() for l in losses])
        out["grads"].append({s: [p.grad.clone() for p in blocks[s].parameters()]
                             for s in stage_ids})
        opt.step()
    out["params"] = {s: [p.detach().clone() for p in blocks[s].parameters()] for s in stage_ids}
    return out


def worker(rank, tmp, cases):
    torch.set_default_dtype(torch.float64)
    store = dist.FileStore(os.path.join(tmp, "store"), PIPELINE)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=PIPELINE,
                            timeout=datetime.timedelta(seconds=60))
    try:
        for name, (csv_path, num_stages, style) in cases.items():
            try:
                result = run_case(rank, csv_path, num_stages, style)
            except Exception:
                # The peer may die first, blocked on this rank; say which case and rank failed.
                print(f"rank {rank}, case {name} ({csv_path}):\n{traceback.format_exc()}",
                      file=sys.stderr, flush=True)
                raise
            torch.save(result, os.path.join(tmp, f"{name}.rank{rank}.pt"))
            dist.barrier()
    finally:
        dist.destroy_process_group()


class TorchCsvRuntimeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_default_dtype(torch.float64)
        cls.tmp = tempfile.TemporaryDirectory()
        cls.csv = {}
        cases = {}
        for name, (schedule, chunks, style) in CASES.items():
            path = os.path.join(cls.tmp.name, f"{name}.csv")
            subprocess.run([ZPIPE, "plan", "--schedule", schedule, "-p", str(PIPELINE),
                            "-m", str(MICROBATCHES), "--cost", COST, "--format", "torch-csv",
                            "--output", path], check=True)
            with open(path) as f:
                cls.csv[name] = f.read()
            cases[name] = (path, PIPELINE * chunks, style)
        # Every case in one pair of processes: importing torch is most of the time.
        mp.spawn(worker, args=(cls.tmp.name, cases), nprocs=PIPELINE, join=True)
        cls.results = {}
        for name in CASES:
            cls.results[name] = [torch.load(os.path.join(cls.tmp.name, f"{name}.rank{r}.pt"))
                                 for r in range(PIPELINE)]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name):
        _, chunks, _ = CASES[name]
        num_stages = PIPELINE * chunks
        want = reference(num_stages)
        ranks = self.results[name]
        last_rank = [r for r in range(PIPELINE) if num_stages - 1 in ranks[r]["params"]][0]
        for step in range(STEPS):
            got = ranks[last_rank]["losses"][step]
            self.assertEqual(len(got), MICROBATCHES, f"{name} step {step}")
            for mb, (g, w) in enumerate(zip(got, want["losses"][step])):
                self.assertAlmostEqual(g, w, delta=TOLERANCE, msg=f"{name} step {step} mb {mb}")
        seen = set()
        for r in range(PIPELINE):
            for s, params in ranks[r]["params"].items():
                seen.add(s)
                for got, ref in zip(params, want["params"][s]):
                    torch.testing.assert_close(got, ref, atol=TOLERANCE, rtol=0,
                                               msg=f"{name}: stage {s} weights")
                for step in range(STEPS):
                    for got, ref in zip(ranks[r]["grads"][step][s], want["grads"][step][s]):
                        torch.testing.assert_close(got, ref, atol=TOLERANCE, rtol=0,
                                                   msg=f"{name}: stage {s} grads, step {step}")
        self.assertEqual(seen, set(range(num_stages)), name)

    def test_zbv_cost_aware(self):
        # V placement: rank r runs stages r and 2p-1-r; the plan splits backward into I and W.
        rows = self.csv["zb-v"].splitlines()
        self.assertEqual([sorted({int(a[0]) for a in row.split(",")}) for row in rows],
                         [[0, 3], [1, 2]])
        self.assertIn("3I0", rows[0])
        self.assertIn("3W0", rows[0])
        self.check("zb-v")

    def test_zb2p(self):
        self.check("zb-2p")

    def test_interleaved(self):
        rows = self.csv["interleaved"].splitlines()
        self.assertEqual([sorted({int(a[0]) for a in row.split(",")}) for row in rows],
                         [[0, 2], [1, 3]])
        self.check("interleaved")

    def test_1f1b_full_backward(self):
        self.assertIn("1B0", self.csv["1f1b"])
        self.check("1f1b")


def main():
    global ZPIPE
    parser = argparse.ArgumentParser()
    parser.add_argument("--zpipe", required=True)
    args, rest = parser.parse_known_args()
    ZPIPE = os.path.abspath(args.zpipe)
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
