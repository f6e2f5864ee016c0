"""`zpipe submit --upload`, end to end over loopback: a zpipe-coordinator with its own folder
(database and artifact store) and two zpipe-worker processes whose data roots are two more
folders, none shared with the client's. The job file names a TorchScript model and a token file
that exist only in the client's folder; `zpipe submit --upload` streams them to the coordinator,
the job names them as artifact:sha256:<hex>, the workers fetch them into their caches and the
job trains to SUCCEEDED. Then: a second job of the same files is a cache hit on both workers (no
second fetch); a file over the coordinator's --artifact-max-job-bytes is refused naming the cap
and the flag, and no job is created; an upload whose bytes do not hash to the digest it claims is
INVALID_ARGUMENT naming both and stores nothing; once the jobs have ended, the coordinator deletes
the artifacts after --artifact-retention.

usage: upload_test.py --zpipe BUILD/client/zpipe [--coordinator-bin BIN] [--worker-bin BIN]
"""
import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "own-model"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))

import model as own_model  # noqa: E402
import zeropipe  # noqa: E402
from errors_test import _binary  # noqa: E402
from local_cluster import ProcessGroup, start_coordinator  # noqa: E402

ZPIPE = None
COORDINATOR_BIN = None
WORKER_BIN = None
VOCAB = 256
SEQ_LEN = 16
CAP_BYTES = 4 << 20  # --artifact-max-job-bytes: the model and tokens fit, BIG does not
RETENTION_S = 3
JOB_TIMEOUT_S = 120


def _pb_upload(sha256, size, data):
    """An UploadArtifactRequest in protobuf wire format (fields 1 string, 2 uint64, 3 bytes)."""
    def varint(n):
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)
    msg = b""
    if sha256:
        msg += b"\x0a" + varint(len(sha256)) + sha256.encode()
    if size:
        msg += b"\x10" + varint(size)
    if data:
        msg += b"\x1a" + varint(len(data)) + data
    return msg


class UploadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="zpipe-upload-")
        cls.group = ProcessGroup(cls.tmp.name, cwd=cls.tmp.name)
        cls.addClassCleanup(cls._stop)
        top = cls.tmp.name
        cls.client_dir, cls.coord_dir = os.path.join(top, "client"), os.path.join(top, "coordinator")
        cls.worker_dirs = [os.path.join(top, f"worker-{i}") for i in range(2)]
        for d in [cls.client_dir, cls.coord_dir, *cls.worker_dirs]:
            os.makedirs(d)
        cls._make_files()
        cls._start()

    @classmethod
    def _make_files(cls):
        m = own_model.build(vocab=VOCAB, seq_len=SEQ_LEN, hidden=32, heads=2, layers=4, seed=3)
        zeropipe.export_model(m, os.path.join(cls.client_dir, "model.pt"), vocab=VOCAB)
        with open("/usr/share/common-licenses/GPL-3", "rb") as f:
            text = np.frombuffer(f.read()[:8000], dtype=np.uint8).astype(np.int64)
        zeropipe.write_tokens(text, os.path.join(cls.client_dir, "train.bin"), dtype="uint16")
        rng = np.random.default_rng(0)
        zeropipe.write_tokens(rng.integers(0, VOCAB, (CAP_BYTES // 2) + 1000),
                              os.path.join(cls.client_dir, "big.bin"), dtype="uint16")

    @classmethod
    def log(cls, name):
        return cls.group.log(name)

    @classmethod
    def logs(cls):
        return cls.group.logs()

    @classmethod
    def _start(cls):
        cls.address = start_coordinator(cls.group, COORDINATOR_BIN, [
            "--db", os.path.join(cls.coord_dir, "coordinator.db"),
            "--artifact-dir", os.path.join(cls.coord_dir, "artifacts"),
            "--artifact-max-job-bytes", str(CAP_BYTES), "--artifact-retention", f"{RETENTION_S}s"])
        for i, d in enumerate(cls.worker_dirs):
            cls.group.spawn(f"worker-{i}", [
                WORKER_BIN, "--coordinator", cls.address, "--name", f"w{i}", "--device",
                f"cpu:{i}", "--threads", "1", "--comm-timeout", "30", "--data-root", d])
        deadline = time.monotonic() + 60
        while True:
            r = cls.zpipe("workers")
            workers = json.loads(r.stdout).get("workers", []) if r.returncode == 0 else []
            if sum(w.get("state") == "idle" for w in workers) == 2:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"workers did not register:\n{r.stdout}\n{cls.logs()}")
            time.sleep(0.1)

    @classmethod
    def _stop(cls):
        cls.group.stop()
        cls.tmp.cleanup()

    @classmethod
    def zpipe(cls, *args, timeout=JOB_TIMEOUT_S):
        return subprocess.run([ZPIPE, "--coordinator", cls.address, "-o", "json", *args],
                              capture_output=True, text=True, timeout=timeout,
                              cwd=cls.tmp.name)  # not the client's folder: paths are the job file's

    def write_job(self, name, data="train.bin"):
        path = os.path.join(self.client_dir, name + ".yaml")
        with open(path, "w") as f:
            f.write(f"""name: {name}
model: {{torchscript: {{path: model.pt}}}}
data: {{path: {data}, dtype: uint16, seq_len: {SEQ_LEN}}}
parallel: {{pipeline: 2, data: 1}}
schedule: {{kind: 1f1b}}
batch: {{microbatches: 2, microbatch_size: 2}}
train: {{iterations: 3, optimizer: adamw, lr: 1.0e-3, seed: 1}}
""")
        return path

    def digest(self, name):
        with open(os.path.join(self.client_dir, name), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    def stored(self):
        return {os.path.basename(p) for p in glob.glob(os.path.join(self.coord_dir, "artifacts", "sha256", "*"))}

    def test_10_upload_trains_to_succeeded(self):
        r = self.zpipe("submit", "--upload", self.write_job("upload-1"), "--id", "upload-1", "--wait")
        self.assertEqual(r.returncode, 0, f"{r.stdout}\n{r.stderr}\n{self.logs()}")
        job = json.loads(r.stdout)
        self.assertEqual(job["state"], "succeeded", job)
        model, data = self.digest("model.pt"), self.digest("train.bin")
        self.assertEqual(job["spec"]["model"]["torchscript"]["path"], f"artifact:sha256:{model}")
        self.assertEqual(job["spec"]["data"]["path"], f"artifact:sha256:{data}")
        self.assertIn(f"uploaded {os.path.join(self.client_dir, 'model.pt')}", r.stderr)
        self.assertLessEqual({model, data}, self.stored())
        for i, d in enumerate(self.worker_dirs):
            cache = os.path.join(d, ".zpipe-artifacts")
            # Rank 0 reads the tokens, rank 1 (the last stage) the targets: both need both files.
            self.assertEqual(sorted(os.listdir(cache)), sorted([model, data]), f"worker {i}")
            self.assertEqual(self.log(f"worker-{i}").count("bytes from the coordinator"), 2)
        self.assertFalse(glob.glob(os.path.join(self.tmp.name, "worker-*", "*.pt")))

    def test_20_second_job_is_a_cache_hit(self):
        fetched = [self.log(f"worker-{i}").count("bytes from the coordinator") for i in range(2)]
        r = self.zpipe("submit", "--upload", self.write_job("upload-2"), "--id", "upload-2", "--wait")
        self.assertEqual(r.returncode, 0, f"{r.stdout}\n{r.stderr}\n{self.logs()}")
        self.assertEqual(json.loads(r.stdout)["state"], "succeeded")
        model = self.digest("model.pt")
        for i in range(2):
            log = self.log(f"worker-{i}")
            self.assertEqual(log.count("bytes from the coordinator"), fetched[i], f"worker {i} fetched again")
            self.assertIn(f"artifact sha256:{model}: cache hit", log)

    def test_30_cap(self):
        r = self.zpipe("submit", "--upload", self.write_job("too-big", data="big.bin"), "--id", "too-big")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("spec.data.path", r.stderr)
        self.assertIn("over the coordinator's cap of 4 MiB", r.stderr)
        self.assertIn("--artifact-max-job-bytes", r.stderr)
        self.assertNotIn(self.digest("big.bin"), self.stored())
        self.assertNotEqual(self.zpipe("status", "too-big").returncode, 0)  # no job was created

    def test_40_wrong_digest(self):
        data = b"the bytes actually sent"
        claimed = hashlib.sha256(b"something else").hexdigest()
        with grpc.insecure_channel(self.address) as channel:
            upload = channel.stream_unary("/zpipe.v1.ArtifactService/UploadArtifact",
                                          request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b)
            with self.assertRaises(grpc.RpcError) as caught:
                upload(iter([_pb_upload(claimed, len(data), data[:10]),
                             _pb_upload("", 0, data[10:])]), timeout=30)
        err = caught.exception
        self.assertEqual(err.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(claimed, err.details())
        self.assertIn(hashlib.sha256(data).hexdigest(), err.details())
        self.assertNotIn(claimed, self.stored())
        self.assertFalse(os.listdir(os.path.join(self.coord_dir, "artifacts", "tmp")))

    def test_50_deleted_after_their_jobs_end(self):
        model = self.digest("model.pt")
        self.assertIn(model, self.stored())
        deadline = time.monotonic() + RETENTION_S + 15
        while model in self.stored() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertNotIn(model, self.stored(), self.log("coordinator")[-2000:])
        self.assertIn("artifacts: deleted", self.log("coordinator"))


def main():
    global ZPIPE, COORDINATOR_BIN, WORKER_BIN
    parser = argparse.ArgumentParser()
    parser.add_argument("--zpipe", required=True)
    parser.add_argument("--coordinator-bin")
    parser.add_argument("--worker-bin")
    args, rest = parser.parse_known_args()
    ZPIPE = os.path.abspath(args.zpipe)
    import errors_test
    errors_test.ZPIPE = ZPIPE
    COORDINATOR_BIN = _binary(args.coordinator_bin, "ZPIPE_COORDINATOR", ("coordinator", "zpipe-coordinator"))
    WORKER_BIN = _binary(args.worker_bin, "ZPIPE_WORKER", ("worker", "zpipe-worker"))
    unittest.main(argv=[sys.argv[0], *rest])


if __name__ == "__main__":
    main()
