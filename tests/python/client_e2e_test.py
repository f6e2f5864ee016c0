"""The Python client (python/zeropipe/client.py) against a real zpipe-coordinator and real
zpipe-worker processes on loopback, with token files (as a deployment has them).

ctest runs it as python_client_e2e with ZPIPE_COORDINATOR_BIN and ZPIPE_WORKER_BIN set to the
built binaries; by hand: PYTHONPATH=python ZPIPE_COORDINATOR_BIN=... ZPIPE_WORKER_BIN=...
/usr/bin/python3 -m unittest tests/python/client_e2e_test.py -v
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import zeropipe  # noqa: E402
from zeropipe import ZeroPipeError  # noqa: E402

CLIENT_TOKEN = "alice-client-token-0123456789"
WORKER_TOKEN = "worker-token-0123456789abcdef"
WORKERS = 2


def synthetic_job(name, iterations=3, forward_ms=5):
    """A small synthetic p = 2 ZB-V job: real activations on the TCP streams, actions that sleep."""
    return {
        "name": name,
        "model": {"synthetic": {"forward_ms": forward_ms, "backward_ms": forward_ms,
                                "weight_ms": forward_ms, "activation_kb": 4}},
        "parallel": {"pipeline": 2},
        "schedule": {"kind": "zb-v", "memory_limit": "auto"},
        "batch": {"microbatches": 4, "microbatch_size": 1},
        "train": {"iterations": iterations, "lr": 0.001},
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClientE2ETest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        coordinator_bin = os.environ.get("ZPIPE_COORDINATOR_BIN")
        worker_bin = os.environ.get("ZPIPE_WORKER_BIN")
        if not coordinator_bin or not worker_bin:
            raise unittest.SkipTest("set ZPIPE_COORDINATOR_BIN and ZPIPE_WORKER_BIN")
        for var in ("ZPIPE_COORDINATOR", "ZPIPE_TOKEN", "ZPIPE_TLS_CA", "ZPIPE_TLS_CERT",
                    "ZPIPE_TLS_KEY"):
            os.environ.pop(var, None)
        coordinator_bin, worker_bin = os.path.abspath(coordinator_bin), os.path.abspath(worker_bin)
        cls.dir = tempfile.mkdtemp(prefix="zpipe-pyclient-")
        cls.logs = []
        cls.procs = []
        # Runs even when setUpClass fails half-way, so no process outlives the test.
        cls.addClassCleanup(cls.stop_cluster)
        for name, text in (("clients.txt", f"alice:{CLIENT_TOKEN}\n"),
                           ("workers.txt", f"{WORKER_TOKEN}\n"),
                           ("worker.token", f"{WORKER_TOKEN}\n")):
            with open(os.path.join(cls.dir, name), "w") as f:
                f.write(text)
        cls.address = f"127.0.0.1:{free_port()}"

        def start(argv, name):
            log = open(os.path.join(cls.dir, name + ".log"), "w")
            cls.logs.append(log)
            cls.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                              cwd=cls.dir, start_new_session=True))

        start([coordinator_bin, "--listen", cls.address, "--metrics-listen", "", "--db",
               ":memory:", "--heartbeat-timeout", "3s",
               "--artifact-dir", os.path.join(cls.dir, "artifacts"),
               "--client-tokens", os.path.join(cls.dir, "clients.txt"),
               "--worker-tokens", os.path.join(cls.dir, "workers.txt")], "coordinator")
        for i in range(WORKERS):
            start([worker_bin, "--coordinator", cls.address, "--name", f"w{i}", "--device",
                   f"cpu:{i}", "--token-file", os.path.join(cls.dir, "worker.token"),
                   "--comm-timeout", "10", "--data-root", cls.dir], f"worker{i}")
        cls.client = zeropipe.Client(cls.address, token=CLIENT_TOKEN)
        cls.wait_idle(WORKERS, 60)

    @classmethod
    def stop_cluster(cls):
        if hasattr(cls, "client"):
            cls.client.close()
        for p in cls.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in cls.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for log in cls.logs:
            log.close()
        if os.environ.get("ZPIPE_KEEP_LOGS"):
            print(f"logs kept in {cls.dir}", file=sys.stderr)
        else:
            shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def wait_idle(cls, n, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if sum(w["state"] == "idle" for w in cls.client.workers()) >= n:
                    return
            except ZeroPipeError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{n} workers did not become idle in {timeout} s")

    def setUp(self):
        # Every test starts with the whole cluster free (an earlier test's job may still be
        # releasing its workers).
        self.wait_idle(WORKERS, 30)

    def run_job(self, spec, job_id=None):
        job_id = self.client.submit(spec, job_id=job_id)
        job = self.client.wait(job_id, timeout=120)
        self.assertEqual(job["state"], "succeeded", job["reason"])
        return job

    # --- a job from submit to trace ---

    def test_submit_wait_status_list_trace(self):
        job_id = self.client.submit(synthetic_job("py-basic"))
        self.assertIsInstance(job_id, str)
        job = self.client.wait(job_id, timeout=120)
        self.assertEqual(job["state"], "succeeded", job["reason"])

        status = self.client.status(job_id)
        self.assertEqual(status["id"], job_id)
        self.assertEqual(status["state"], "succeeded")
        self.assertEqual(status["submitted_by"], "alice")
        self.assertEqual(status["spec"]["name"], "py-basic")
        self.assertEqual(status["spec"]["parallel"], {"pipeline": 2, "data": 1})  # resolved
        self.assertEqual(status["spec"]["train"]["optimizer"], "adamw")
        self.assertEqual(status["spec"]["model"]["synthetic"]["forward_ms"], 5.0)
        self.assertNotIn("gpt", status["spec"]["model"])
        self.assertEqual(status["spec"]["device"], "cpu")  # resolved by the coordinator
        self.assertIsNone(status["spec"]["schedule"]["memory_limit"])  # auto
        self.assertEqual(status["progress"]["iterations_done"], 3)
        self.assertEqual(status["progress"]["iterations_total"], 3)
        self.assertRegex(status["create_time"], r"^\d{4}-\d\d-\d\dT.*Z$")
        self.assertIsInstance(status["end_time"], str)
        self.assertEqual(len(status["ranks"]), 2)
        self.assertEqual({r["worker_name"] for r in status["ranks"]}, {"w0", "w1"})
        summary = status["latest_summary"]
        self.assertEqual(summary["iteration"], 2)
        self.assertIsInstance(summary["bubble_rate"], float)
        self.assertIsNone(summary["loss"])  # a synthetic model computes no loss
        self.assertIsNone(summary["eval_loss"])  # an unset optional field
        self.assertIsInstance(status["predicted"]["num_actions"], int)
        self.assertEqual(status["progress"]["ranks"][0]["microbatches"][0], "done")
        json.dumps(status)  # plain values only

        listed = {j["id"]: j for j in self.client.list()}
        self.assertEqual(listed[job_id]["state"], "succeeded")
        self.assertIn(job_id, [j["id"] for j in self.client.list(states=["succeeded"])])
        self.assertNotIn(job_id, [j["id"] for j in self.client.list(states="running")])

        trace = self.client.trace(job_id)
        self.assertEqual(trace["job_id"], job_id)
        self.assertEqual(trace["schedule"], "zb-v")
        self.assertEqual(trace["iteration"], 2)
        self.assertTrue(trace["complete"])
        self.assertEqual(len(trace["ranks"]), 2)
        self.assertEqual(len(trace["predicted"]), 2)
        kinds = {a["kind"] for r in trace["ranks"] for a in r["actions"]}
        self.assertTrue({"F", "B", "W"} <= kinds, kinds)
        action = trace["ranks"][0]["actions"][0]
        self.assertIsInstance(action["start"], float)
        self.assertGreaterEqual(action["end"], action["start"])
        self.assertEqual(self.client.trace(job_id, iteration=1)["iteration"], 1)

        plan = self.client.plan(job_id)
        self.assertEqual(plan["schedule"], "zb-v")
        self.assertEqual([r["pipeline_rank"] for r in plan["ranks"]], [0, 1])

    def test_watch_events(self):
        job_id = self.client.submit(synthetic_job("py-watch", iterations=3))
        events = list(self.client.watch(job_id, progress_interval_ms=50))
        kinds = [e["kind"] for e in events]
        self.assertEqual(kinds[0], "snapshot", kinds)
        self.assertEqual(events[0]["snapshot"]["id"], job_id)
        last = events[-1]
        self.assertEqual(last["kind"], "state_change")
        self.assertEqual(last["state_change"]["to"], "succeeded")
        self.assertEqual(last["state_change"]["from"], "running")
        iterations = [e["iteration"]["iteration"] for e in events if e["kind"] == "iteration"]
        self.assertEqual(iterations, [0, 1, 2])
        sequences = [e["sequence"] for e in events]
        self.assertEqual(sequences, sorted(sequences))
        self.assertTrue(all(isinstance(e["time"], str) for e in events))
        for e in events:
            self.assertEqual(len([k for k in ("snapshot", "state_change", "iteration", "progress")
                                  if k in e]), 1, e)

    # --- logs ---

    def test_logs_of_each_rank_filtered_and_followed(self):
        job_id = self.client.submit(synthetic_job("py-logs", iterations=10, forward_ms=20))
        followed = list(self.client.logs(job_id, follow=True))  # ends when the job does
        self.assertEqual(self.client.status(job_id)["state"], "succeeded")
        # -1: the coordinator's line per iteration (bubble, tokens/s, loss where there is one).
        self.assertEqual({line["rank"] for line in followed}, {-1, 0, 1})
        job_lines = [line["text"] for line in followed if line["rank"] == -1]
        self.assertEqual(len(job_lines), 10)
        self.assertTrue(job_lines[0].startswith("iteration 0: "), job_lines[0])
        for rank in (0, 1):
            texts = [line["text"] for line in followed if line["rank"] == rank]
            self.assertIn(f"job {job_id}: rank {rank}/0 of p=2 d=1, 10 iterations", texts)
            self.assertEqual(texts[-1], f"job {job_id}: rank finished")
        for line in followed:
            self.assertEqual(set(line), {"time", "text", "pipeline_rank", "data_rank", "rank",
                                         "sequence"})
            self.assertRegex(line["time"], r"^\d{4}-\d\d-\d\dT.*Z$")
            self.assertIsInstance(line["sequence"], int)
        sequences = [line["sequence"] for line in followed]
        self.assertEqual(sequences, sorted(sequences))

        held = self.client.logs(job_id)
        self.assertIsInstance(held, list)
        self.assertEqual([line["text"] for line in held], [line["text"] for line in followed])
        only = self.client.logs(job_id, rank=1)
        self.assertTrue(only)
        self.assertTrue(all(line["rank"] == 1 for line in only))
        self.assertEqual(len(self.client.logs(job_id, tail=2)), 2)

        with self.assertRaises(ZeroPipeError) as e:
            self.client.logs(job_id, rank=2)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.exception.field, "rank")
        with self.assertRaises(ZeroPipeError) as e:
            self.client.logs("no-such-job")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_workers(self):
        workers = self.client.workers()
        self.assertEqual([w["name"] for w in workers], ["w0", "w1"])
        for w in workers:
            self.assertEqual(w["state"], "idle")
            self.assertEqual(w["device_kind"], "cpu")
            self.assertIsInstance(w["memory_bytes"], int)
            self.assertGreater(w["memory_bytes"], 0)
            self.assertRegex(w["last_heartbeat_time"], r"Z$")
            self.assertIsInstance(w["capabilities"]["libtorch_version"], str)
            self.assertIs(w["capabilities"]["torch_cuda"], False)
        self.assertEqual(len(self.client.workers(include_dead=True)), 2)

    # --- cancel and wait ---

    def test_cancel_and_wait_timeout(self):
        job_id = self.client.submit(synthetic_job("py-cancel", iterations=100000, forward_ms=20))
        with self.assertRaises(ZeroPipeError) as e:
            self.client.wait(job_id, timeout=0.5)
        self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertIn(self.client.status(job_id)["state"], ("pending", "scheduling", "running"))
        job = self.client.cancel(job_id, reason="enough")
        self.assertEqual(job["state"], "cancelled")
        self.assertEqual(job["reason"], "enough")
        self.assertEqual(self.client.wait(job_id, timeout=30)["state"], "cancelled")
        self.assertEqual(self.client.cancel(job_id)["state"], "cancelled")  # unchanged

    def test_cancel_finished_job_is_refused(self):
        job = self.run_job(synthetic_job("py-done", iterations=1))
        with self.assertRaises(ZeroPipeError) as e:
            self.client.cancel(job["id"])
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

    def test_delete_finished_and_forced(self):
        job = self.run_job(synthetic_job("py-delete-done", iterations=1))
        self.assertEqual(self.client.delete(job["id"]), "succeeded")
        with self.assertRaises(ZeroPipeError) as e:
            self.client.status(job["id"])
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertNotIn(job["id"], [j["id"] for j in self.client.list()])

        job_id = self.client.submit(synthetic_job("py-delete-busy", iterations=100000,
                                                  forward_ms=20))
        with self.assertRaises(ZeroPipeError) as e:
            self.client.delete(job_id)
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("--force", e.exception.message)
        self.assertEqual(self.client.delete(job_id, force=True), "cancelled")
        with self.assertRaises(ZeroPipeError) as e:
            self.client.delete(job_id, force=True)
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_labels_listed_and_filtered(self):
        spec = synthetic_job("py-labels", iterations=1)
        spec["labels"] = {"team": "nlp", "run": "7"}
        job_id = self.client.submit(spec)
        other = self.client.submit(dict(synthetic_job("py-labels-2", iterations=1),
                                        labels={"team": "vision"}))
        self.assertEqual(self.client.status(job_id)["spec"]["labels"], {"run": "7", "team": "nlp"})
        ids = [j["id"] for j in self.client.list(labels={"team": "nlp"})]
        self.assertIn(job_id, ids)
        self.assertNotIn(other, ids)
        self.assertEqual([j["id"] for j in self.client.list(labels={"team": "nlp", "run": "7"},
                                                            since=3600)], [job_id])
        self.assertEqual(self.client.list(labels={"team": "nlp"}, since=-3600), [])
        with self.assertRaises(ZeroPipeError) as e:
            self.client.submit(dict(spec, labels={"bad key": "x"}))
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.exception.field, "spec.labels")

    # --- specs in every form ---

    def test_submit_job_file_text_and_round_trip(self):
        path = os.path.join(self.dir, "job.yaml")
        with open(path, "w") as f:
            f.write("name: py-file\n"
                    "model:\n  synthetic: {forward_ms: 5, backward_ms: 5, weight_ms: 5}\n"
                    "parallel: {pipeline: 2}\nschedule: {kind: 1f1b}\n"
                    "batch: {microbatches: 2, microbatch_size: 1}\n"
                    "train: {iterations: 1, lr: 1.0e-3, betas: [0.9, 0.95]}\n")
        job = self.run_job(path)
        self.assertEqual(job["spec"]["name"], "py-file")
        self.assertEqual(job["spec"]["train"]["betas"], [0.9, 0.95])
        self.assertEqual(job["spec"]["schedule"]["kind"], "1f1b")

        text = json.dumps(synthetic_job("py-text", iterations=1))
        self.assertEqual(self.run_job(text)["spec"]["name"], "py-text")

        # A job's spec dict is a spec again, defaults resolved by the coordinator: the raw file
        # and the spec status returns are the same job under one id; another spec is refused.
        self.assertEqual(self.client.submit(path, job_id="py-idem"), "py-idem")
        before = self.client.status("py-idem")
        spec = before["spec"]
        self.assertEqual(spec["train"]["optimizer"], "adamw")  # resolved, not in the file
        self.assertEqual(spec["restart"]["backoff"], "2s")
        self.assertEqual(self.client.submit(spec, job_id="py-idem"), "py-idem")
        self.assertEqual(self.client.status("py-idem")["create_time"], before["create_time"])
        self.assertEqual(self.client.wait("py-idem", timeout=120)["state"], "succeeded")
        spec["train"]["iterations"] = 2
        with self.assertRaises(ZeroPipeError) as e:
            self.client.submit(spec, job_id="py-idem")
        self.assertEqual(e.exception.code, grpc.StatusCode.ALREADY_EXISTS)

    def test_bad_spec_names_the_field(self):
        bad = synthetic_job("py-bad")
        bad["parallel"]["pipeline"] = 0
        with self.assertRaises(ZeroPipeError) as e:
            self.client.submit(bad)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.exception.field, "spec.parallel.pipeline")
        self.assertIn("spec.parallel.pipeline", str(e.exception))

        typo = synthetic_job("py-typo")
        typo["schedule"]["knd"] = "zb-v"
        with self.assertRaises(ZeroPipeError) as e:
            self.client.submit(typo)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.exception.field, "spec.schedule.knd")

        with self.assertRaises(ZeroPipeError) as e:
            self.client.submit("name: x\nparallel: {pipeline: four}\n")
        self.assertEqual(e.exception.field, "spec.parallel.pipeline")
        self.assertIn("line 2", e.exception.message)

        with self.assertRaises(ZeroPipeError) as e:
            self.client.submit(os.path.join(self.dir, "missing.yaml"))
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

        with self.assertRaises(ZeroPipeError) as e:
            self.client.status("no-such-job")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIsNone(e.exception.field)

    def test_job_files_read_as_zpipe_reads_them(self):
        # Every example job file, read by the Python reader and by `zpipe submit --dry-run`
        # (client/job_file.cc), reaches the coordinator as the same JobSpec.
        cli = os.environ.get("ZPIPE_CLI_BIN")
        if not cli:
            self.skipTest("set ZPIPE_CLI_BIN")
        from zeropipe import load_spec
        from zeropipe._proto import coordinator_pb2

        token_file = os.path.join(self.dir, "client.token")
        with open(token_file, "w") as f:
            f.write(CLIENT_TOKEN + "\n")
        examples = os.path.join(ROOT, "examples")
        names = sorted(n for n in os.listdir(examples) if n.endswith(".yaml"))
        self.assertGreaterEqual(len(names), 4)
        for name in names:
            path = os.path.join(examples, name)
            out = subprocess.run([cli, "--coordinator", self.address, "--token-file", token_file,
                                  "-o", "json", "submit", "--dry-run", path],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            from_cli = json.loads(out.stdout)["spec"]
            response = self.client._stub.SubmitJob(
                coordinator_pb2.SubmitJobRequest(spec=load_spec(path), validate_only=True),
                metadata=(("authorization", f"Bearer {CLIENT_TOKEN}"),), timeout=30)
            from_python = zeropipe.client._spec_to_dict(response.job.spec)
            self.assertEqual(from_python, from_cli, name)

    def test_cli_json_is_the_python_clients_vocabulary(self):
        # `zpipe -o json` and the Python client print the same objects for the same job and
        # workers (docs/guide.md "JSON output"; client/json_output.h and zeropipe/client.py).
        cli = os.environ.get("ZPIPE_CLI_BIN")
        if not cli:
            self.skipTest("set ZPIPE_CLI_BIN")
        job_id = self.run_job(synthetic_job("py-vocabulary", iterations=2))["id"]
        token_file = os.path.join(self.dir, "client.token")
        with open(token_file, "w") as f:
            f.write(CLIENT_TOKEN + "\n")

        def zpipe(*args):
            out = subprocess.run([cli, "--coordinator", self.address, "--token-file", token_file,
                                  "-o", "json", *args], capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout)

        status = zpipe("status", job_id)
        self.assertEqual(status, self.client.status(job_id))
        self.assertEqual(status["state"], "succeeded")
        self.assertIsInstance(status["predicted"]["num_actions"], int)
        self.assertEqual(status["spec"]["grad_sync"], {"bucket_mb": 25.0, "overlap": True})
        listed = {j["id"]: j for j in zpipe("list")["jobs"]}
        self.assertEqual(listed[job_id], {j["id"]: j for j in self.client.list()}[job_id])

        def steady(workers):  # the heartbeat moves between the two calls
            return [{k: v for k, v in w.items() if k != "last_heartbeat_time"} for w in workers]
        self.assertEqual(steady(zpipe("workers")["workers"]), steady(self.client.workers()))

        events = [json.loads(line) for line in subprocess.run(
            [cli, "--coordinator", self.address, "--token-file", token_file, "-o", "json",
             "watch", job_id], capture_output=True, text=True, timeout=60).stdout.splitlines()]
        self.assertEqual(events[0]["kind"], "snapshot")
        self.assertEqual(events[0]["snapshot"], self.client.status(job_id))

    def test_validate(self):
        predicted = self.client.validate(synthetic_job("py-validate"))
        self.assertGreater(predicted["makespan_ms"], 0)
        # span_ms (the longest per-rank span) never exceeds the first-start-to-last-end makespan.
        self.assertGreater(predicted["span_ms"], 0)
        self.assertLessEqual(predicted["span_ms"], predicted["makespan_ms"] + 1e-9)
        self.assertIsInstance(predicted["num_actions"], int)

    # --- upload (`zpipe submit --upload`; tests/train/upload_test.py is the CLI's side) ---

    def client_folder(self):
        """A folder of this program's that the workers do not share (their data root is
        self.dir), so a job can only reach its files by upload."""
        folder = tempfile.mkdtemp(prefix="zpipe-pyclient-own-")
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        self.assertFalse(os.path.realpath(folder).startswith(os.path.realpath(self.dir) + os.sep))
        return folder

    @staticmethod
    def digest(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    def test_submit_upload_trains_to_succeeded(self):
        try:
            sys.path.insert(0, os.path.join(ROOT, "examples", "own-model"))
            import model as own_model  # noqa: E402 (torch)
        except ImportError as e:
            self.skipTest(f"the TorchScript model needs torch: {e}")
        finally:
            sys.path.remove(os.path.join(ROOT, "examples", "own-model"))
        folder = self.client_folder()
        vocab, seq_len = 256, 16
        m = own_model.build(vocab=vocab, seq_len=seq_len, hidden=32, heads=2, layers=4, seed=3)
        zeropipe.export_model(m, os.path.join(folder, "model.pt"), vocab=vocab)
        with open(os.path.join(ROOT, "README.md"), "rb") as f:
            zeropipe.write_tokens(list(f.read(8000)), os.path.join(folder, "train.bin"))
        job_file = os.path.join(folder, "job.yaml")
        with open(job_file, "w") as f:  # relative paths: the job file's folder
            f.write(f"""name: py-upload
model: {{torchscript: {{path: model.pt}}}}
data: {{path: train.bin, dtype: uint16, seq_len: {seq_len}}}
parallel: {{pipeline: 2, data: 1}}
schedule: {{kind: 1f1b}}
batch: {{microbatches: 2, microbatch_size: 2}}
train: {{iterations: 3, optimizer: adamw, lr: 1.0e-3, seed: 1}}
""")
        job_id = self.client.submit(job_file, job_id="py-upload", upload=True)
        job = self.client.wait(job_id, timeout=120)
        self.assertEqual(job["state"], "succeeded", job["reason"])
        spec = job["spec"]
        self.assertEqual(spec["model"]["torchscript"]["path"],
                         "artifact:sha256:" + self.digest(os.path.join(folder, "model.pt")))
        self.assertEqual(spec["data"]["path"],
                         "artifact:sha256:" + self.digest(os.path.join(folder, "train.bin")))
        # The workers fetched them into their cache (under their data root) from the coordinator.
        uploaded = {self.digest(os.path.join(folder, n)) for n in ("model.pt", "train.bin")}
        self.assertLessEqual(uploaded, set(os.listdir(os.path.join(self.dir, ".zpipe-artifacts"))))
        # The same files again are already on the coordinator: nothing new, the same spec.
        self.assertEqual(self.client.submit(job_file, job_id="py-upload", upload=True), job_id)

    def test_upload_artifact_streams_chunks_and_names_the_sha256(self):
        folder = self.client_folder()
        path = os.path.join(folder, "tokens.bin")
        with open(path, "wb") as f:  # three 1 MiB chunks, the last partial
            f.write(os.urandom((2 << 20) + 12345))
        ref = "artifact:sha256:" + self.digest(path)
        self.assertEqual(self.client.upload_artifact(path),
                         {"ref": ref, "size": (2 << 20) + 12345, "created": True})
        self.assertEqual(self.client.upload_artifact(path)["created"], False)  # already held
        self.assertIn(self.digest(path),
                      os.listdir(os.path.join(self.dir, "artifacts", "sha256")))
        empty = os.path.join(folder, "empty.bin")
        open(empty, "wb").close()
        self.assertEqual(self.client.upload_artifact(empty)["ref"],
                         "artifact:sha256:" + hashlib.sha256(b"").hexdigest())
        # Errors: a file that is not there names the field and creates no job; the upload needs
        # a client token.
        spec = synthetic_job("py-upload-missing")
        spec["data"] = {"path": os.path.join(folder, "missing.bin"), "dtype": "uint16",
                        "seq_len": 16}
        jobs = len(self.client.list())
        with self.assertRaises(ZeroPipeError) as e:
            self.client.submit(spec, upload=True)
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(e.exception.field, "spec.data.path")
        self.assertIn(f"cannot read '{os.path.join(folder, 'missing.bin')}'", e.exception.message)
        self.assertEqual(len(self.client.list()), jobs)
        with zeropipe.Client(self.address, token="") as c:
            with self.assertRaises(ZeroPipeError) as e:
                c.upload_artifact(path)
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    # --- authentication ---

    def test_wrong_or_missing_token_is_unauthenticated(self):
        for token in ("not-the-right-token-0123456789", ""):
            with zeropipe.Client(self.address, token=token) as c:
                with self.assertRaises(ZeroPipeError) as e:
                    c.list()
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED, token)
                with self.assertRaises(ZeroPipeError) as e:
                    c.submit(synthetic_job("py-unauth"))
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        # A worker token may not act as a client.
        with zeropipe.Client(self.address, token=WORKER_TOKEN) as c:
            with self.assertRaises(ZeroPipeError) as e:
                c.workers()
            self.assertEqual(e.exception.code, grpc.StatusCode.PERMISSION_DENIED)

    def test_token_from_environment(self):
        os.environ["ZPIPE_TOKEN"] = CLIENT_TOKEN
        try:
            with zeropipe.Client(self.address) as c:
                self.assertEqual(len(c.workers()), 2)
        finally:
            del os.environ["ZPIPE_TOKEN"]

    def test_unreachable_coordinator(self):
        with zeropipe.Client(f"127.0.0.1:{free_port()}", token=CLIENT_TOKEN, timeout=2) as c:
            with self.assertRaises(ZeroPipeError) as e:
                c.workers()
        self.assertIn(e.exception.code, (grpc.StatusCode.UNAVAILABLE,
                                         grpc.StatusCode.DEADLINE_EXCEEDED))


class ClientTlsTest(unittest.TestCase):
    """tls_ca / tls_cert / tls_key against a coordinator serving mTLS (tests/tls/make-certs.sh)."""

    @classmethod
    def setUpClass(cls):
        coordinator_bin = os.environ.get("ZPIPE_COORDINATOR_BIN")
        if not coordinator_bin or not shutil.which("openssl"):
            raise unittest.SkipTest("set ZPIPE_COORDINATOR_BIN; needs openssl")
        cls.dir = tempfile.mkdtemp(prefix="zpipe-pyclient-tls-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        subprocess.run([os.path.join(ROOT, "tests", "tls", "make-certs.sh"), cls.dir], check=True,
                       timeout=120)
        cls.address = f"127.0.0.1:{free_port()}"
        cls.log = open(os.path.join(cls.dir, "coordinator.log"), "w")
        cls.addClassCleanup(cls.log.close)
        cls.coordinator = subprocess.Popen(
            [os.path.abspath(coordinator_bin), "--listen", cls.address, "--metrics-listen", "",
             "--db", ":memory:", "--tls-cert", cls.cert("server.crt"),
             "--tls-key", cls.cert("server.key"), "--tls-client-ca", cls.cert("ca.crt")],
            stdout=cls.log, stderr=subprocess.STDOUT, start_new_session=True)

        def stop():
            cls.coordinator.terminate()
            try:
                cls.coordinator.wait(10)
            except subprocess.TimeoutExpired:
                cls.coordinator.kill()
                cls.coordinator.wait()

        cls.addClassCleanup(stop)

    @classmethod
    def cert(cls, name):
        return os.path.join(cls.dir, name)

    def client(self, **tls):
        return zeropipe.Client(self.address, token="", timeout=5, **tls)

    def test_verified_tls_with_a_client_certificate(self):
        deadline = time.monotonic() + 30
        with self.client(tls_ca=self.cert("ca.crt"), tls_cert=self.cert("client.crt"),
                         tls_key=self.cert("client.key")) as c:
            while True:
                try:
                    self.assertEqual(c.workers(), [])
                    self.assertEqual(c.list(), [])
                    break
                except ZeroPipeError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        # The CA as PEM bytes works the same.
        with open(self.cert("ca.crt"), "rb") as f:
            ca = f.read()
        with self.client(tls_ca=ca, tls_cert=self.cert("client.crt"),
                         tls_key=self.cert("client.key")) as c:
            self.assertEqual(c.workers(), [])

    def test_untrusted_or_missing_tls_fails(self):
        # Wait until the coordinator serves, then try what must not work.
        self.test_verified_tls_with_a_client_certificate()
        for tls in ({"tls_ca": self.cert("other-ca.crt"), "tls_cert": self.cert("client.crt"),
                     "tls_key": self.cert("client.key")},  # does not trust the server
                    {"tls_ca": self.cert("ca.crt")},  # no client certificate for mTLS
                    {}):  # plaintext to a TLS port
            with self.client(**tls) as c:
                with self.assertRaises(ZeroPipeError) as e:
                    c.workers()
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE, tls)
        with self.assertRaises(ZeroPipeError) as e:
            self.client(tls_ca=self.cert("missing.crt"))
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("missing.crt", e.exception.message)
        with self.assertRaises(ZeroPipeError) as e:
            self.client(tls_ca=self.cert("ca.crt"), tls_cert=self.cert("client.crt"))
        self.assertIn("tls_cert and tls_key go together", e.exception.message)


if __name__ == "__main__":
    unittest.main()
