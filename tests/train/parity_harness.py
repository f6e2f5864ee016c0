"""The machinery of the parity tests (parity_test.py: the own-model GPT; llama_parity_test.py:
the Llama example): a model trained by ZeroPipe (real coordinator and worker processes,
`zpipe run --local`) and by a plain single-process PyTorch loop written here, from the same
initial weights on the same token windows, with AdamW, warmup + cosine and gradient clipping.
Every iteration's loss and the exported model's parameters must agree within 1e-5 relative.

A test subclasses ParityTestCase, sets `build` to a function returning the nn.Sequential to export,
and calls run_case per configuration; main() parses --zpipe and runs unittest. A Python model
(model.python: no export, the workers build it) subclasses PythonParityTestCase instead and sets
`model_file`, `factory` and `args`.
"""
import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import zeropipe  # noqa: E402

ZPIPE = None

SEQ_LEN = 16
VOCAB = 256
ITERATIONS = 6
LR = 3e-3
MIN_LR = 3e-4
WARMUP = 2
CLIP = 0.5
WEIGHT_DECAY = 0.05
BETAS = (0.9, 0.95)
# Adam divides by sqrt(v) + eps: a gradient that is zero in exact arithmetic (the key bias of
# attention: softmax ignores a shift shared by all keys) is float noise of ~1e-9, which eps = 1e-8
# would blow up to a full-size step of random sign in any two implementations that sum in another
# order. eps = 1e-6 keeps such noise negligible, so the comparison measures ZeroPipe, not noise.
EPS = 1e-6
TOLERANCE = 1e-5


def lr_at(t):
    if t < WARMUP:
        return LR * (t + 1) / WARMUP
    progress = (t - WARMUP) / (ITERATIONS - WARMUP)
    return MIN_LR + (LR - MIN_LR) * 0.5 * (1 + math.cos(math.pi * progress))


def reference(net, tokens_path, d, m, b, shuffle_seed):
    """The plain loop: one process, the whole model `net`, the same windows. Returns the
    per-iteration losses and the trained parameters by name."""
    net.train()
    params = list(net.parameters())
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    losses = []
    for t in range(ITERATIONS):
        for g in opt.param_groups:
            g["lr"] = lr_at(t)
        opt.zero_grad()
        total = 0.0
        for r in range(d):
            for i in range(m):
                x, y = zeropipe.batch(tokens_path, "uint16", SEQ_LEN, t, r, i, d, m, b,
                                      shuffle_seed=shuffle_seed)
                # As ZeroPipe runs blocks (a Sequential's children or a module's stages()): a
                # tuple a block returns is the next one's arguments;
                # a last block returning (logits, aux) adds aux to the cross-entropy.
                loss = zeropipe.loss_of(zeropipe.run_blocks(net, x), y)
                (loss / (d * m)).backward()
                total += loss.item()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        losses.append(total / (d * m))
    return losses, dict(net.named_parameters())


class ParityTestCase(unittest.TestCase):
    """setUpClass exports `build()` (a staticmethod the subclass sets) and writes the token file;
    run_case trains one configuration both ways and compares. The reference of a (d, m, b,
    shuffle) configuration is computed once per class: it does not depend on the schedule or p."""

    build = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="zpipe-parity-")
        cls.dir = cls.tmp.name
        cls.model_path = zeropipe.export_model(cls.build(), os.path.join(cls.dir, "model.pt"),
                                               vocab=VOCAB)
        with open("/usr/share/common-licenses/GPL-3", "rb") as f:
            text = f.read()[:20000]
        cls.tokens_path = os.path.join(cls.dir, "train.bin")
        zeropipe.write_tokens(list(text), cls.tokens_path, dtype="uint16")
        cls.references = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def reference(self, d, m, b, shuffle_seed):
        key = (d, m, b, shuffle_seed)
        if key not in self.references:
            self.references[key] = reference(self.reference_net(), self.tokens_path, d, m, b,
                                             shuffle_seed)
        return self.references[key]

    def reference_net(self):
        """The model the plain loop trains: the exported file, as the workers load it."""
        torch._C._set_graph_executor_optimize(False)
        return torch.jit.load(self.model_path)

    def model_section(self, cuts):
        torchscript = {"path": self.model_path}
        if cuts is not None:
            torchscript["cuts"] = list(cuts)
        return {"torchscript": torchscript}

    def trained_parameters(self, model_file):
        """The parameters of the model `zpipe run --out` exported, by name."""
        return dict(torch.jit.load(model_file).named_parameters())

    def run_zpipe(self, name, spec):
        """Runs job `spec` (a dict) with `zpipe run --local`, its files in the folder `name`;
        asserts it succeeded and returns the run's JSON summary."""
        out = os.path.join(self.dir, name)
        os.makedirs(out, exist_ok=True)
        job = os.path.join(out, name + ".json")
        with open(job, "w") as f:
            json.dump(spec, f)
        run = subprocess.run([ZPIPE, "-o", "json", "run", job, "--local", "--out", out],
                             capture_output=True, text=True, timeout=600)
        self.assertEqual(run.returncode, 0, f"zpipe run failed:\n{run.stderr[-4000:]}")
        summary = json.loads(run.stdout)
        self.assertEqual(summary["state"], "succeeded", summary.get("reason"))
        return summary

    def spec(self, name, schedule, p, d, m, b, shuffle_seed=None, cuts=None):
        """The job run_case runs, as a dict."""
        spec = {
            "name": name,
            "model": self.model_section(cuts),
            "data": {"path": self.tokens_path, "dtype": "uint16", "seq_len": SEQ_LEN},
            "parallel": {"pipeline": p, "data": d},
            "schedule": {"kind": schedule},
            "batch": {"microbatches": m, "microbatch_size": b},
            "train": {"iterations": ITERATIONS, "optimizer": "adamw", "lr": LR, "seed": 1,
                      "weight_decay": WEIGHT_DECAY, "betas": list(BETAS), "eps": EPS,
                      "clip_grad_norm": CLIP,
                      "lr_schedule": {"warmup": WARMUP, "decay": "cosine", "min_lr": MIN_LR}},
        }
        if shuffle_seed is not None:
            spec["data"]["shuffle_seed"] = shuffle_seed
        return spec

    def run_case(self, name, schedule, p, d, m, b, shuffle_seed=None, cuts=None):
        """`cuts`: model.<kind>.cuts (None: the workers profile the blocks)."""
        summary = self.run_zpipe(name, self.spec(name, schedule, p, d, m, b, shuffle_seed, cuts))
        self.check(name, summary, d, m, b, shuffle_seed)
        return summary

    def run_resume_case(self, name, schedule, p, d, m, b, cuts, every, resume_schedule=None,
                        resume_p=None):
        """Trains the job with checkpoint.every = `every`, then deletes every checkpoint after the
        first, as if the job had died there, and runs the same job again (optionally as another
        schedule and p with as many stages): it resumes from that checkpoint, and its losses from
        there on and its trained weights must be the plain loop's."""
        spec = self.spec(name, schedule, p, d, m, b, cuts=cuts)
        ckpt = os.path.join(self.dir, name + "-ckpt")
        spec["checkpoint"] = {"every": every, "dir": ckpt}
        self.run_zpipe(name, spec)
        saved = [f"iter-{k}" for k in range(every, ITERATIONS + 1, every)]
        self.assertEqual(sorted(os.listdir(os.path.join(ckpt, name))), sorted(saved))
        for later in saved[1:]:
            shutil.rmtree(os.path.join(ckpt, name, later))
        if resume_schedule is not None:
            spec["schedule"]["kind"] = resume_schedule
        if resume_p is not None:
            spec["parallel"]["pipeline"] = resume_p
        summary = self.run_zpipe(name + "-resumed", spec)
        self.check(name, summary, d, m, b, None, first_iteration=every)
        return summary

    def check(self, name, summary, d, m, b, shuffle_seed, first_iteration=0):
        """The run's losses from `first_iteration` on and its exported weights against the plain
        loop's."""
        want_losses, want_params = self.reference(d, m, b, shuffle_seed)
        want_losses = want_losses[first_iteration:]
        got = summary["losses"]
        self.assertEqual(len(got), ITERATIONS - first_iteration)
        worst_loss = max(abs(g - w) / abs(w) for g, w in zip(got, want_losses))
        for t, (g, w) in enumerate(zip(got, want_losses)):
            self.assertLess(abs(g - w) / abs(w), TOLERANCE,
                            f"iteration {first_iteration + t}: zeropipe {g}, reference {w}")
        # The model learned something (the losses are not all equal).
        self.assertLess(got[-1], got[0])
        model_file = summary["model"]["file"]
        self.assertTrue(model_file, summary["model"])
        trained = self.trained_parameters(model_file)
        self.assertEqual(sorted(trained), sorted(want_params))
        worst_param = 0.0
        for k, w in want_params.items():
            err = (trained[k] - w).abs().max().item() / max(w.abs().max().item(), 1e-12)
            worst_param = max(worst_param, err)
            self.assertLess(err, TOLERANCE, f"parameter {k}: relative error {err}")
        print(f"\n{name}: losses {got[0]:.4f} -> {got[-1]:.4f}; worst relative error: loss "
              f"{worst_loss:.1e}, parameters {worst_param:.1e}", file=sys.stderr)


class PythonParityTestCase(ParityTestCase):
    """The same comparison for a Python model: the workers build `factory(**args)` from
    `model_file` (after torch.manual_seed(SEED), as ZeroPipe does with train.seed), the plain loop
    builds it the same way here, and the export is a state dict."""

    model_file = None
    factory = "build_model"
    args = {}
    compile = None  # model.python.compile when set ("trace", "script")
    token_vocab = VOCAB  # the text's bytes modulo this are the tokens
    SEED = 1  # train.seed of run_case's spec

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="zpipe-pyparity-")
        cls.dir = cls.tmp.name
        with open("/usr/share/common-licenses/GPL-3", "rb") as f:
            text = f.read()[:20000]
        cls.tokens_path = os.path.join(cls.dir, "train.bin")
        zeropipe.write_tokens([t % cls.token_vocab for t in text], cls.tokens_path,
                              dtype="uint16")
        cls.references = {}

    def reference_net(self):
        spec = importlib.util.spec_from_file_location("parity_model", self.model_file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        torch.manual_seed(self.SEED)
        return getattr(module, self.factory)(**self.args)

    def model_section(self, cuts):
        python = {"file": self.model_file, "factory": self.factory, "args": self.args}
        if self.compile is not None:
            python["compile"] = self.compile
        if cuts is not None:
            python["cuts"] = list(cuts)
        return {"python": python}

    def trained_parameters(self, model_file):
        return torch.load(model_file)


def main():
    """usage: TEST.py --zpipe BUILD/client/zpipe [unittest arguments, e.g. -v or a test name]"""
    global ZPIPE
    parser = argparse.ArgumentParser()
    parser.add_argument("--zpipe", required=True)
    args, rest = parser.parse_known_args()
    ZPIPE = os.path.abspath(args.zpipe)
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest)
