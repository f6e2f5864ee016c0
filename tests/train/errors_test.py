"""Train your own model, failure paths: one real cluster (a zpipe-coordinator on a free loopback
port with a temporary database, and two zpipe-worker processes) for the whole class, and jobs that
break the contract. A model that is not TorchScript, was saved by a newer torch than the
workers' LibTorch, has blocks that share a parameter (tied weights) or whose blocks break the
block contract, a missing or malformed data file, token ids at or above the model's vocab and a
missing eval file fail the job (exit 1 of `zpipe submit --wait`) with a reason naming the file
and the problem; each is tried both with profiled cuts (the coordinator asks a worker to load
and time the model) and with explicit cuts (the ranks load it when they start). Invalid spec
fields are refused at submit (exit 2) naming the field, and create no job. After all of that the
same cluster runs good jobs: with explicit cuts (layout.source "spec") and without
(layout.source "measured", stages carrying their measured costs), and both workers are idle again.

usage: errors_test.py --zpipe BUILD/client/zpipe [--coordinator-bin BIN] [--worker-bin BIN]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "own-model"))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))

import model as own_model  # noqa: E402
import zeropipe  # noqa: E402
from local_cluster import ProcessGroup, start_coordinator  # noqa: E402

ZPIPE = None
COORDINATOR_BIN = None
WORKER_BIN = None

VOCAB = 256
SEQ_LEN = 16
WORKERS = 2
# own_model.build(layers=4): Embed, 4 Blocks, Head.
BLOCKS = 6
# The file format version of a model "from a newer torch" (test 1b).
NEWER_FORMAT_VERSION = 99
# Generous: a job here takes well under a second; a stuck job must not hang the test.
JOB_TIMEOUT_S = 120


def _binary(flag_value, env, sibling):
    """A flag's value, else $env, else beside zpipe in the build tree (../SUBDIR/NAME) or in the
    same directory (installed)."""
    if flag_value:
        return os.path.abspath(flag_value)
    if os.environ.get(env):
        return os.environ[env]
    client_dir = os.path.dirname(ZPIPE)
    subdir, name = sibling
    for path in (os.path.join(os.path.dirname(client_dir), subdir, name),
                 os.path.join(client_dir, name)):
        if os.access(path, os.X_OK):
            return path
    raise RuntimeError(f"{name} not found beside {ZPIPE}; pass it or set {env}")


class _Flat(torch.nn.Module):
    """Breaks the contract as a last block: returns [b, L] instead of logits [b, L, V]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=2)


class _Pair(torch.nn.Module):
    """Breaks the contract anywhere: returns a tuple instead of one tensor."""

    def forward(self, x: torch.Tensor):
        return x, x


class _Blocks(torch.nn.Module):
    """Holds blocks as ordered children like a Sequential, but does not chain them in forward,
    so TorchScript accepts blocks whose outputs no other block could take (a Sequential holding
    _Pair cannot even be scripted). ZeroPipe only looks at the children."""

    def __init__(self, blocks):
        super().__init__()
        for k, block in enumerate(blocks):
            self.add_module(str(k), block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _with_format_version(src, dst, version):
    """Copies the TorchScript archive `src` to `dst` with its version record (what LibTorch
    checks before reading anything else) set to `version`, as a newer torch would write it."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.split("/", 1)[1:] in (["version"], [".data/version"]):
                data = f"{version}\n".encode()
            zout.writestr(info, data)


class TrainErrorsTest(unittest.TestCase):
    # Workers that died during a case and were started again (the case that killed one fails).
    restarted = []

    # ---- the cluster ---------------------------------------------------------------------------

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="zpipe-errors-")
        cls.dir = cls.tmp.name
        cls.group = ProcessGroup(cls.dir)
        cls.restarted = []
        # Runs even when setUpClass fails halfway (tearDownClass would not).
        cls.addClassCleanup(cls._stop_cluster)
        cls._make_files()
        cls._start_cluster()

    @classmethod
    def tearDownClass(cls):
        cls._stop_cluster()

    @classmethod
    def _spawn(cls, name, argv):
        proc = cls.group.spawn(name, argv)
        proc.worker_index = int(name.split("-")[1]) if name.startswith("worker-") else None
        return proc

    @classmethod
    def _log(cls, name, tail=40):
        return cls.group.log(name, tail)

    @classmethod
    def _logs(cls):
        return cls.group.logs()

    @classmethod
    def _check_alive(cls):
        latest = {p.worker_index: p for p in cls.group.procs}  # the coordinator under None
        for p in latest.values():
            if p.poll() is not None:
                raise AssertionError(f"{p.log_name} exited with {p.returncode}:\n{cls._logs()}")

    @classmethod
    def _start_cluster(cls):
        try:
            cls.address = start_coordinator(
                cls.group, COORDINATOR_BIN, ["--db", os.path.join(cls.dir, "coordinator.db")])
        except RuntimeError as e:
            raise AssertionError(str(e)) from None
        cls.group.procs[0].worker_index = None
        for i in range(WORKERS):
            cls._spawn_worker(i)
        cls._wait_idle(timeout=60)
        assert cls.group.procs[0].poll() is None

    @classmethod
    def _spawn_worker(cls, i, log_name=None):
        return cls._spawn(log_name or f"worker-{i}", [
            WORKER_BIN, "--coordinator", cls.address, "--name", f"w{i}", "--device", f"cpu:{i}",
            "--threads", "1", "--comm-timeout", "30", "--data-root", cls.dir])

    def setUp(self):
        self._revive()

    def _revive(self):
        """A worker an earlier case killed (that case failed) is started again under its name, so
        one crash does not fail every later case; test_90 asserts that none was needed."""
        procs = self.group.procs
        if procs and procs[0].poll() is not None:
            self.fail(f"the coordinator is gone:\n{self._logs()}")
        for i in range(WORKERS):
            current = [p for p in procs[1:] if p.worker_index == i][-1]
            if current.poll() is not None:
                name = f"worker-{i}-restart{len(self.restarted) + 1}"
                self.restarted.append(f"w{i} (exit {current.returncode}, log {current.log_name})")
                self._spawn_worker(i, name)
        self._wait_idle(timeout=60)

    @classmethod
    def _stop_cluster(cls):
        """Workers first (SIGTERM stops them cleanly), then the coordinator; anything still there
        after the grace period is killed with its whole process group. Idempotent."""
        cls.group.stop()
        if getattr(cls, "tmp", None) is not None:
            cls.tmp.cleanup()
            cls.tmp = None

    # ---- the CLI -------------------------------------------------------------------------------

    @classmethod
    def zpipe(cls, *args, timeout=JOB_TIMEOUT_S):
        return subprocess.run([ZPIPE, "--coordinator", cls.address, "-o", "json", *args],
                              capture_output=True, text=True, timeout=timeout)

    @classmethod
    def _workers(cls):
        r = cls.zpipe("workers", timeout=30)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout).get("workers", [])

    @classmethod
    def _wait_idle(cls, timeout=30):
        """Until WORKERS workers are registered and idle; returns them."""
        deadline = time.monotonic() + timeout
        workers = None
        while True:
            workers = cls._workers()
            if workers is not None and len(workers) == WORKERS and all(
                    w["state"] == "idle" for w in workers):
                return workers
            cls._check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"not {WORKERS} idle workers after {timeout} s: "
                                     f"{json.dumps(workers)}\n{cls._logs()}")
            time.sleep(0.1)

    def job_count(self):
        r = self.zpipe("list", timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return len(json.loads(r.stdout).get("jobs", []))

    def status(self, job_id):
        r = self.zpipe("status", job_id, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    # ---- files and specs -----------------------------------------------------------------------

    @classmethod
    def _path(cls, name):
        return os.path.join(cls.dir, name)

    @classmethod
    def _make_files(cls):
        def build():
            return own_model.build(vocab=VOCAB, seq_len=SEQ_LEN, hidden=32, heads=2, layers=4,
                                   seed=3)

        zeropipe.export_model(build(), cls._path("model.pt"), vocab=VOCAB)
        # 1. Not TorchScript at all.
        rng = np.random.default_rng(0)
        with open(cls._path("random.pt"), "wb") as f:
            f.write(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
        # 2. The last block returns [b, L], not logits [b, L, V] (export_model would refuse it).
        flat = build()
        flat.append(_Flat())
        torch.jit.save(torch.jit.script(flat), cls._path("flat-logits.pt"))
        # 3b. Block 0 raises on token ids [b, 16]: its position embedding holds 8 positions.
        torch.jit.save(torch.jit.script(own_model.build(vocab=VOCAB, seq_len=8, hidden=32,
                                                        heads=2, layers=4, seed=3)),
                       cls._path("short-positions.pt"))
        # 3c. Token embedding over 200 ids, logits over 256.
        small = build()
        small[0] = own_model.Embed(200, SEQ_LEN, 32)
        torch.jit.save(torch.jit.script(small), cls._path("small-embedding.pt"))
        # 1b. Saved by a torch newer than the workers' LibTorch: the archive's file format
        # version above any LibTorch 2.x reads (torch writes 3 to 10 today).
        _with_format_version(cls._path("model.pt"), cls._path("newer-torch.pt"),
                             NEWER_FORMAT_VERSION)
        # 1c. The head's projection is the embedding's weight (tied): blocks 0 and 5 share it.
        tied = build()
        tied[-1].out.weight = tied[0].tok.weight
        zeropipe.export_model(tied, cls._path("tied.pt"), vocab=VOCAB)
        # 3. Block 2 returns a tuple.
        blocks = list(build())
        blocks.insert(2, _Pair())
        torch.jit.save(torch.jit.script(_Blocks(blocks)), cls._path("tuple-block.pt"))

        with open("/usr/share/common-licenses/GPL-3", "rb") as f:
            text = np.frombuffer(f.read()[:8000], dtype=np.uint8).astype(np.int64)
        zeropipe.write_tokens(text, cls._path("train.bin"), dtype="uint16")
        zeropipe.write_tokens(text[:2000], cls._path("eval.bin"), dtype="uint16")
        # 5. An odd number of bytes: not a whole number of uint16 tokens.
        with open(cls._path("train.bin"), "rb") as f:
            raw = f.read()
        with open(cls._path("odd.bin"), "wb") as f:
            f.write(raw[:-1])
        # 6. Ids up to 300 for a vocab of 256; the first offender is token 1000.
        big = text.copy()
        big[1000] = 300
        big[1500:1600] = np.arange(200, 300)
        zeropipe.write_tokens(big, cls._path("big-ids.bin"), dtype="uint16")

    def spec(self, name, model="model.pt", data="train.bin", eval_path=None, cuts=None,
             schedule="1f1b", microbatches=2, iterations=2):
        s = {
            "name": name,
            "model": {"torchscript": {"path": self._path(model)}},
            "data": {"path": self._path(data), "dtype": "uint16", "seq_len": SEQ_LEN},
            "parallel": {"pipeline": 2, "data": 1},
            "schedule": {"kind": schedule},
            "batch": {"microbatches": microbatches, "microbatch_size": 2},
            "train": {"iterations": iterations, "optimizer": "adamw", "lr": 1e-3, "seed": 1},
        }
        if cuts is not None:
            s["model"]["torchscript"]["cuts"] = list(cuts)
        if eval_path is not None:
            s["eval"] = {"path": self._path(eval_path), "every": 1, "batches": 2}
        return s

    def submit(self, spec):
        """zpipe submit FILE --wait; returns (exit code, job JSON or None, stderr)."""
        path = self._path(spec["name"] + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        try:
            r = self.zpipe("submit", path, "--wait")
        except subprocess.TimeoutExpired:
            self.fail(f"job {spec['name']}: zpipe submit --wait did not return within "
                      f"{JOB_TIMEOUT_S} s (stuck?); jobs: {self.zpipe('list').stdout[-4000:]}\n"
                      f"{self._logs()}")
        job = json.loads(r.stdout) if r.stdout.strip() else None
        return r.returncode, job, r.stderr

    # ---- the cases -----------------------------------------------------------------------------

    def assert_fails(self, spec_kwargs, *needles, ways=("profiled", "cuts")):
        """The job fails at submit or start, with profiled cuts (a worker loads and times the model
        before the plan is made) and with explicit cuts (the ranks load it when they start), its
        reason naming every needle; nothing ran and the workers are idle again afterwards."""
        for how in ways:
            cuts = {"profiled": None, "cuts": [3]}[how]
            with self.subTest(how=how):
                self._revive()
                name = f"{self._testMethodName[5:]}-{how}".replace("_", "-")
                code, job, err = self.submit(self.spec(name, cuts=cuts, **spec_kwargs))
                self.assertEqual(code, 1, f"{name}: exit {code}, want 1 (job failed)\n{err}\n"
                                          f"{json.dumps(job)[:2000]}")
                self.assertIsNotNone(job, err)
                self.assertEqual(job["state"], "failed", job.get("reason"))
                got = self.status(job["id"])
                self.assertEqual(got["state"], "failed")
                reason = got["reason"]
                self.assertEqual(reason, job["reason"])
                if os.environ.get("ZPIPE_ERRORS_VERBOSE"):
                    print(f"\n{name}: {reason}", file=sys.stderr)
                for needle in needles:
                    self.assertIn(needle, reason, f"{name}: the reason does not say {needle!r}")
                # Nothing ran.
                self.assertEqual((got["progress"] or {}).get("iterations_done", 0), 0)
                self._wait_idle()

    def test_01_model_not_torchscript(self):
        self.assert_fails({"model": "random.pt"}, self._path("random.pt"),
                          "not a TorchScript file")

    def test_01b_model_from_a_newer_torch(self):
        libtorch = torch.__version__.split("+")[0]  # the venv's torch is the workers' LibTorch
        self.assert_fails({"model": "newer-torch.pt"}, self._path("newer-torch.pt"),
                          "written by a newer torch",
                          f"file format version {NEWER_FORMAT_VERSION}",
                          f"this worker's LibTorch is {libtorch}", "reads versions up to",
                          f"script and save the model with torch {libtorch}")

    def test_01c_tied_weights_across_blocks(self):
        self.assert_fails({"model": "tied.pt"}, self._path("tied.pt"),
                          "block 0 ('0') and block 5 ('5') share a parameter", "'0.tok.weight'",
                          "'5.out.weight'", "untie")

    def test_02_last_block_not_logits(self):
        self.assert_fails({"model": "flat-logits.pt"}, self._path("flat-logits.pt"),
                          "the last block (block 6", "returned [2, 16]", "logits [b, L, V]")

    def test_03_block_returns_tuple(self):
        self.assert_fails({"model": "tuple-block.pt"}, self._path("tuple-block.pt"), "block 2",
                          "Tuple", "one tensor")

    def test_03b_block_fails_on_its_input(self):
        # Position embedding for 8 tokens, seq_len 16: block 0 raises (index out of range) when
        # the worker probes the model. The TorchScript interpreter throws that as a
        # std::runtime_error, not a c10::Error; the worker must report it, not abort.
        self.assert_fails({"model": "short-positions.pt"}, self._path("short-positions.pt"),
                          "block 0", "failed on an input [2, 16]", "index out of range")

    def test_03c_block_fails_while_profiled(self):
        # Embedding over 200 ids, logits over 256: the probe (zeros) passes, timing the blocks on
        # random ids below 256 does not. (With explicit cuts nothing is timed, and this model
        # trains on ids below 200.)
        self.assert_fails({"model": "small-embedding.pt"}, self._path("small-embedding.pt"),
                          "profiling", "block 0", "index out of range", ways=("profiled",))

    def test_04_data_missing(self):
        self.assert_fails({"data": "no-such-train.bin"}, "data: ",
                          self._path("no-such-train.bin"), "No such file")

    def test_05_data_odd_size(self):
        self.assert_fails({"data": "odd.bin"}, "data: ", self._path("odd.bin"), "15999 bytes",
                          "not a multiple of 2")

    def test_06_token_ids_beyond_vocab(self):
        self.assert_fails({"data": "big-ids.bin"}, "data: ", self._path("big-ids.bin"),
                          "token 1000", "is 300", "vocab 256")

    def test_07_eval_missing(self):
        self.assert_fails({"eval_path": "no-such-eval.bin"}, "eval: ",
                          self._path("no-such-eval.bin"), "No such file")

    def test_07b_eval_ids_beyond_vocab(self):
        self.assert_fails({"eval_path": "big-ids.bin"}, "eval: ", self._path("big-ids.bin"),
                          "is 300", "vocab 256")

    def test_08_invalid_spec_refused_at_submit(self):
        def bad(name, edit):
            s = self.spec("bad-" + name)
            edit(s)
            return s

        cases = {
            "data.dtype": (bad("dtype", lambda s: s["data"].update(dtype="int8")),
                           "spec.data.dtype", "int8"),
            "lr_schedule.decay": (bad("decay", lambda s: s["train"].update(
                lr_schedule={"warmup": 0, "decay": "exp"})),
                "spec.train.lr_schedule.decay", "exp"),
            "betas": (bad("betas", lambda s: s["train"].update(betas=[0.9, 0.95, 0.99])),
                      "spec.train.betas", "3"),
            # zb-v, p = 2: four stages, three cuts, here not increasing.
            "cuts": (bad("cuts", lambda s: (s["schedule"].update(kind="zb-v"),
                                            s["batch"].update(microbatches=4),
                                            s["model"]["torchscript"].update(cuts=[2, 4, 3]))),
                     "spec.model.torchscript.cuts", "increasing"),
            "no data": (bad("no-data", lambda s: s.pop("data")), "spec.data", "required"),
        }
        before = self.job_count()
        for what, (spec, field, detail) in cases.items():
            with self.subTest(what):
                code, job, err = self.submit(spec)
                self.assertEqual(code, 2, f"{what}: exit {code}, want 2\n{err}\n{job}")
                self.assertIsNone(job)
                # zpipe submit names the field as the job file spells it, after the file and line
                # ("bad-cuts.json:1: model.torchscript.cuts: ..."), the coordinator's spec. prefix
                # dropped.
                self.assertIn(field.removeprefix("spec."), err)
                self.assertIn(detail, err)
        self.assertEqual(self.job_count(), before, "a refused spec created a job")

    def test_90_good_job_with_cuts_after_failures(self):
        """The cluster that just failed all of the above runs the next job, with the spec's cuts
        (no profiling), and both workers are idle after it."""
        cuts = [2, 3, 5]
        spec = self.spec("good-cuts", eval_path="eval.bin", cuts=cuts, schedule="zb-v",
                         microbatches=4, iterations=3)
        spec["checkpoint"] = {"every": 3, "dir": self._path("checkpoints")}
        code, job, err = self.submit(spec)
        self.assertEqual(code, 0, f"{err}\n{json.dumps(job)[:3000]}\n{self._logs()}")
        got = self.status(job["id"])
        self.assertEqual(got["state"], "succeeded", got.get("reason"))
        self.assertEqual(got["progress"]["iterations_done"], 3)
        self.assertIn("loss", got["latest_summary"])
        self.assertIn("eval_loss", got["latest_summary"])
        self.assertEqual(self.restarted, [], "workers died during the failing jobs")
        layout = got["layout"]
        self.assertEqual(layout["source"], "spec", layout)
        self.assertEqual(layout["cuts"], cuts, layout)
        workers = self._wait_idle()
        self.assertEqual(sorted(w["name"] for w in workers), ["w0", "w1"])
        # The trained model back from the job's checkpoint: the user's structure, trained values.
        out = self._path("good-cuts.model.pt")
        env = dict(os.environ, ZPIPE_WORKER_BIN=WORKER_BIN)
        r = subprocess.run([ZPIPE, "--coordinator", self.address, "export", job["id"], "-f", out],
                           capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("after iteration 3", r.stdout)
        trained = dict(torch.jit.load(out).named_parameters())
        initial = dict(torch.jit.load(self._path("model.pt")).named_parameters())
        self.assertEqual(sorted(trained), sorted(initial))
        self.assertTrue(any(not torch.equal(trained[k], initial[k]) for k in initial),
                        "the exported model holds the initial weights")

    def test_91_good_job_measured_cuts(self):
        code, job, err = self.submit(self.spec("good-measured", eval_path="eval.bin",
                                               schedule="zb-v", microbatches=4, iterations=3))
        self.assertEqual(code, 0, f"{err}\n{json.dumps(job)[:3000]}\n{self._logs()}")
        got = self.status(job["id"])
        self.assertEqual(got["state"], "succeeded", got.get("reason"))
        layout = got["layout"]
        self.assertEqual(layout["source"], "measured", layout)
        self.assertEqual(layout["blocks"], BLOCKS, layout)
        stages = layout["stages"]
        self.assertEqual(len(stages), 4, layout)  # zb-v: p = 2, two chunks per rank
        self.assertEqual(len(layout["cuts"]), 3, layout)
        self.assertEqual([s["first_block"] for s in stages[1:]], layout["cuts"], layout)
        self.assertEqual(stages[0]["first_block"], 0, layout)
        self.assertEqual(stages[-1]["end_block"], BLOCKS, layout)
        for s in stages:
            self.assertLess(s["first_block"], s["end_block"], layout)
            self.assertGreater(s["forward_ms"], 0, layout)
            self.assertGreater(s["backward_ms"], 0, layout)
        self._wait_idle()

    def test_95_no_cuda_worker_without_a_cuda_device(self):
        """Never silently on the CPU: a worker asked to drive a GPU that LibTorch cannot see
        refuses to start (exit 2, saying so) instead of registering as a CUDA worker. (A worker
        that can see a GPU but lacks a CUDA LibTorch or NCCL fails a CUDA job saying which:
        worker_job_runner_test checks those reasons.)"""
        import torch as _torch
        if _torch.cuda.is_available():
            self.skipTest("a CUDA device is visible here")
        r = subprocess.run([WORKER_BIN, "--coordinator", self.address, "--name", "g0",
                            "--device", "cuda:0"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--device cuda:0", r.stderr)
        self.assertIn("no CUDA device", r.stderr)
        self.assertNotIn("g0", [w["name"] for w in self._workers()])

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--zpipe", required=True)
    parser.add_argument("--coordinator-bin")
    parser.add_argument("--worker-bin")
    args, rest = parser.parse_known_args()
    ZPIPE = os.path.abspath(args.zpipe)
    COORDINATOR_BIN = _binary(args.coordinator_bin, "ZPIPE_COORDINATOR_BIN",
                              ("coordinator", "zpipe-coordinator"))
    WORKER_BIN = _binary(args.worker_bin, "ZPIPE_WORKER_BIN", ("worker", "zpipe-worker"))
    unittest.main(argv=[sys.argv[0]] + rest)
