"""Tests of the job-spec reader (zeropipe/jobspec.py, which runs zpipe's job-file reader: set
ZPIPE_BIN, or build build/client/zpipe) and the message-to-dict conversion of the client, without
a coordinator. They need python3-grpcio, python3-protobuf and python3-yaml, not torch. ctest runs
them as python_client_unit; tests/python/client_e2e_test.py runs the client against a real
coordinator, tests/python/job_file_agreement_test.py checks the reader against `zpipe` itself."""
import json
import os
import sys
import tempfile
import unittest

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from zeropipe import ZeroPipeError, load_spec  # noqa: E402
from zeropipe._proto import coordinator_pb2, job_pb2  # noqa: E402
from zeropipe.client import to_dict  # noqa: E402
from zeropipe.vocabulary import from_dict, spec_to_dict  # noqa: E402
from zeropipe.errors import ZeroPipeError as ErrorsZeroPipeError  # noqa: E402

YAML = """\
name: demo
model:
  gpt: {layers: 8, hidden: 256, heads: 4, seq_len: 128, vocab: 512}
data: {path: train.bin, dtype: uint16, seq_len: 128, shuffle_seed: 1}
parallel: {pipeline: 4, data: 1}
schedule: {kind: zb-v, memory_limit: auto}
batch: {microbatches: 8, microbatch_size: 4}
train: {iterations: 50, optimizer: adamw, lr: 3e-4, betas: [0.9, 0.95], clip_grad_norm: 0}
grad_sync: {bucket_mb: 25, overlap: false}
checkpoint: {every: 20, dir: /ckpt, on_error: skip}
device: cuda
"""


class LoadSpecTest(unittest.TestCase):
    def error(self, spec):
        with self.assertRaises(ZeroPipeError) as e:
            load_spec(spec)
        return e.exception

    def test_yaml_text(self):
        spec = load_spec(YAML)
        self.assertEqual(spec.name, "demo")
        self.assertEqual(spec.model.gpt.hidden, 256)
        self.assertEqual(spec.data.shuffle_seed, 1)
        self.assertFalse(spec.schedule.HasField("memory_limit"))  # auto = unset
        self.assertAlmostEqual(spec.train.lr, 3e-4)  # 3e-4 is a number, as in the C++ reader
        self.assertEqual(list(spec.train.betas), [0.9, 0.95])
        self.assertTrue(spec.train.HasField("clip_grad_norm"))  # 0 = off, not unset
        self.assertFalse(spec.grad_sync.overlap)
        self.assertTrue(spec.grad_sync.HasField("overlap"))
        self.assertEqual(spec.checkpoint.on_error, job_pb2.CHECKPOINT_ON_ERROR_SKIP)
        self.assertEqual(spec.device, job_pb2.DEVICE_KIND_CUDA)
        self.assertEqual(spec.data.path, "train.bin")  # text: as written

    def test_json_dict_and_yaml_agree(self):
        as_dict = {"name": "demo", "parallel": {"pipeline": 2}, "schedule": {"kind": "1f1b"},
                   "train": {"lr": 0.001, "iterations": 3}, "device": "DEVICE_KIND_CPU"}
        expected = load_spec(as_dict)
        self.assertEqual(load_spec(json.dumps(as_dict)), expected)
        self.assertEqual(load_spec(json.dumps(as_dict).encode()), expected)
        self.assertEqual(load_spec("name: demo\nparallel: {pipeline: 2}\nschedule: {kind: 1f1b}\n"
                                   "train: {lr: 0.001, iterations: 3}\ndevice: cpu\n"), expected)
        self.assertIs(load_spec(expected), expected)

    def test_job_file_paths_are_relative_to_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("job.yaml", "job.json", "job.spec"):
                path = os.path.join(d, name)
                with open(path, "w") as f:
                    if name.endswith(".json"):
                        f.write('{"model": {"torchscript": {"path": "m.pt"}},'
                                ' "data": {"path": "../t.bin"}, "eval": {"path": "/abs/e.bin"}}')
                    else:
                        f.write("model: {torchscript: {path: m.pt}}\ndata: {path: ../t.bin}\n"
                                "eval: {path: /abs/e.bin}\n")
                spec = load_spec(path)
                self.assertEqual(spec.model.torchscript.path, os.path.join(d, "m.pt"))
                self.assertEqual(spec.data.path, os.path.join(os.path.dirname(d), "t.bin"))
                self.assertEqual(spec.eval.path, "/abs/e.bin")

    def test_errors_name_the_field_and_line(self):
        e = self.error("name: x\nschedule:\n  knd: zb-v\n")
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.field, "spec.schedule.knd")
        self.assertEqual(e.message, "line 3: unknown field 'schedule.knd' "
                         "(schedule has: kind, memory_limit, chunks, replan_every, "
                         "replan_threshold, recompute, search_budget, polish)")
        e = self.error({"parallel": {"pipeline": "4"}})
        self.assertEqual(e.field, "spec.parallel.pipeline")
        self.assertIn('expects an integer, got the string "4"', e.message)
        e = self.error("parallel: {pipeline: '4'}\n")
        self.assertIn('expects an integer, got the string "4"', e.message)
        e = self.error("parallel: {pipeline: 4.5}\n")
        self.assertIn("expects an integer, got the number 4.5", e.message)
        e = self.error("parallel: {pipeline: 3000000000}\n")
        self.assertIn("expects a 32-bit integer", e.message)
        e = self.error("name: 5\n")
        self.assertIn("quote it to use it as text", e.message)
        e = self.error("data: {shuffle_seed: -1}\n")
        self.assertIn("expects a non-negative integer", e.message)
        e = self.error("device: gpu\n")
        self.assertEqual(e.field, "spec.device")
        self.assertIn("one of: cpu, cuda", e.message)
        e = self.error("schedule: {memory_limit: lots}\n")
        self.assertIn("expects a number or auto", e.message)
        e = self.error("train: {betas: [0.9, x]}\n")
        self.assertEqual(e.field, "spec.train.betas[1]")
        e = self.error("train: {betas: 0.9}\n")
        self.assertIn("expects a list", e.message)
        e = self.error("model: {gpt: {layers: 2}, synthetic: {forward_ms: 1}}\n")
        self.assertEqual(e.field, "spec.model.synthetic")
        self.assertIn("conflicts with 'model.gpt'", e.message)
        e = self.error("grad_sync: {overlap: 'true'}\n")
        self.assertIn("expects true or false", e.message)
        e = self.error("name: a\nname: b\n")
        self.assertIn("line 2: duplicate field 'name'", e.message)
        e = self.error('{"name": "a", "name": "b"}')
        self.assertIn("duplicate field 'name'", e.message)
        e = self.error("parallel: [1, 2]\n")
        self.assertIn("expects a map, got a list", e.message)
        e = self.error("- 1\n")
        self.assertIn("a job file is a map of fields", e.message)
        e = self.error("name: [\n")
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIsNone(e.field)
        e = self.error('{"parallel": {"pipeline": NaN}}')  # not JSON
        self.assertIn("line 1, column 27: syntax error while parsing value", e.message)
        e = self.error({"name": object()})
        self.assertIn("got object", e.message)
        e = self.error(42)
        self.assertIn("got int", e.message)

    def test_null_leaves_unset(self):
        spec = load_spec("name: x\neval:\ndata: null\nschedule: {memory_limit: ~}\n")
        self.assertFalse(spec.HasField("eval"))
        self.assertFalse(spec.HasField("data"))
        self.assertFalse(spec.schedule.HasField("memory_limit"))
        self.assertFalse(load_spec({"name": "x", "eval": None}).HasField("eval"))

    def test_limits(self):
        e = self.error("name: x\n" + "#" * (1 << 20))
        self.assertIn("the job-file size limit", e.message)
        e = self.error("a: " + "[" * 70 + "]" * 70 + "\n")
        self.assertIn("the job-file depth limit", e.message)
        laughs = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 10) + "]\n"
            for i in range(8))
        e = self.error(laughs)
        self.assertIn("the job-file expansion limit", e.message)

    def test_files(self):
        e = self.error("/no/such/job.yaml")
        self.assertEqual(e.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("/no/such/job.yaml: cannot open the job file", e.message)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.yaml")
            with open(path, "wb") as f:
                f.write(b"name: x\nschedule: {kind: 1f1b}\ntrain: {lr: fast}\n")
            e = self.error(path)
            self.assertEqual(e.message, f"{path}: line 3: field 'train.lr' expects a number, "
                             "got 'fast'")
            with open(path, "wb") as f:
                f.write(b"name: x\nschedule: {kind: \xff}\n")
            e = self.error(path)
            self.assertIn("line 2: field 'schedule.kind' is not UTF-8 text", e.message)

    def test_without_zpipe_the_error_says_what_to_do(self):
        saved = os.environ.get("ZPIPE_BIN")
        os.environ["ZPIPE_BIN"] = "/no/such/zpipe"
        try:
            e = self.error("name: x\n")
        finally:
            if saved is None:
                del os.environ["ZPIPE_BIN"]
            else:
                os.environ["ZPIPE_BIN"] = saved
        self.assertEqual(e.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("ZPIPE_BIN=/no/such/zpipe", e.message)
        self.assertEqual(load_spec(job_pb2.JobSpec(name="x")).name, "x")  # a message needs no zpipe

    def test_examples_load(self):
        examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
        names = [n for n in os.listdir(examples) if n.endswith(".yaml")]
        self.assertTrue(names)
        for name in names:
            spec = load_spec(os.path.join(examples, name))
            self.assertTrue(spec.name, name)


class ToDictTest(unittest.TestCase):
    def test_job_record(self):
        job = job_pb2.Job(id="j1", state=job_pb2.JOB_STATE_RUNNING)
        job.spec.CopyFrom(load_spec(YAML))
        job.create_time.FromSeconds(1700000000)
        job.progress.ranks.add(microbatches=[job_pb2.MICROBATCH_PHASE_BACKWARD])
        job.latest_summary.iteration = 3
        d = to_dict(job)
        self.assertEqual(d["state"], "running")
        self.assertEqual(d["create_time"], "2023-11-14T22:13:20Z")
        self.assertIsNone(d["start_time"])
        self.assertIsNone(d["predicted"])
        self.assertEqual(d["progress"]["ranks"][0]["microbatches"], ["backward"])
        self.assertIsNone(d["latest_summary"]["loss"])
        self.assertEqual(d["spec"]["device"], "cuda")
        self.assertEqual(d["spec"]["checkpoint"]["on_error"], "skip")
        self.assertIsNone(d["spec"]["schedule"]["memory_limit"])
        self.assertEqual(d["spec"]["model"]["gpt"]["layers"], 8)
        self.assertNotIn("synthetic", d["spec"]["model"])
        json.dumps(d)

    def test_numbers_stay_numbers(self):
        w = coordinator_pb2.ListWorkersResponse().workers.add(memory_bytes=25276026880)
        d = to_dict(w)
        self.assertEqual(d["memory_bytes"], 25276026880)
        self.assertIsNone(d["state"])  # UNSPECIFIED
        self.assertIsNone(d["capabilities"])

    def test_event_kind(self):
        e = coordinator_pb2.JobEvent(sequence=7)
        e.state_change.to = job_pb2.JOB_STATE_FAILED
        d = to_dict(e)
        self.assertEqual(d["kind"], "state_change")
        self.assertEqual(d["state_change"], {"from": None, "to": "failed", "reason": ""})
        self.assertNotIn("snapshot", d)

    def test_from_dict_reads_the_vocabulary_back(self):
        spec = load_spec(YAML)
        self.assertEqual(from_dict(spec_to_dict(spec), job_pb2.JobSpec()), spec)
        job = job_pb2.Job(id="j1", state=job_pb2.JOB_STATE_RUNNING)
        job.create_time.FromSeconds(1700000000)
        job.latest_summary.loss = 0.0  # set to 0: not the same as unset
        event = coordinator_pb2.JobEvent(sequence=3)
        event.snapshot.CopyFrom(job)
        self.assertEqual(from_dict(to_dict(event), coordinator_pb2.JobEvent()), event)
        w = coordinator_pb2.ListWorkersResponse().workers.add(
            memory_bytes=25276026880, device_kind=job_pb2.DEVICE_KIND_CPU)
        w.last_heartbeat_time.FromMilliseconds(1700000000250)
        self.assertEqual(from_dict(to_dict(w), type(w)()), w)

    def test_one_exception_type(self):
        self.assertIs(ZeroPipeError, ErrorsZeroPipeError)


if __name__ == "__main__":
    unittest.main()
