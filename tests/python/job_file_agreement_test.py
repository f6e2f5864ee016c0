"""One job-file reader: `zpipe submit --parse-only` (client/job_file.cc) and the Python client's
zeropipe.load_spec, which runs that reader, agree on every example job file and every error case
of the job-file tests: the same spec, the same error text and code.

The error cases are client/testdata/job_file_errors.json (client_job_file_test runs them through
the C++ reader directly) and those of python/tests/test_jobspec.py, each as a file (YAML or JSON
by its extension) and as text on standard input. ctest runs it as python_job_file_agreement with
ZPIPE_BIN set to the built zpipe; by hand: PYTHONPATH=python ZPIPE_BIN=build/client/zpipe
.venv/bin/python -m unittest tests/python/job_file_agreement_test.py -v
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
from zeropipe import ZeroPipeError, load_spec  # noqa: E402
from zeropipe.vocabulary import spec_to_dict  # noqa: E402

# The error cases of python/tests/test_jobspec.py, as text, with what its assertions expect.
PYTHON_CASES = [
    ("py_unknown_nested", "yaml", "name: x\nschedule:\n  knd: zb-v\n",
     "line 3: unknown field 'schedule.knd' (schedule has: kind,"),
    ("py_word_for_int", "yaml", "name: x\nparallel: {pipeline: four}\n", "line 2: "),
    ("py_quoted_int", "yaml", "parallel: {pipeline: '4'}\n",
     'expects an integer, got the string "4"'),
    ("py_fraction", "yaml", "parallel: {pipeline: 4.5}\n", "expects an integer, got the number 4.5"),
    ("py_int32", "yaml", "parallel: {pipeline: 3000000000}\n", "expects a 32-bit integer"),
    ("py_number_for_string", "yaml", "name: 5\n", "quote it to use it as text"),
    ("py_negative", "yaml", "data: {shuffle_seed: -1}\n", "expects a non-negative integer"),
    ("py_enum", "yaml", "device: gpu\n", "one of: cpu, cuda"),
    ("py_memory_limit", "yaml", "schedule: {memory_limit: lots}\n", "expects a number or auto"),
    ("py_list_item", "yaml", "train: {betas: [0.9, x]}\n", "field 'train.betas[1]'"),
    ("py_not_a_list", "yaml", "train: {betas: 0.9}\n", "expects a list"),
    ("py_two_models", "yaml", "model: {gpt: {layers: 2}, synthetic: {forward_ms: 1}}\n",
     "conflicts with 'model.gpt'"),
    ("py_quoted_bool", "yaml", "grad_sync: {overlap: 'true'}\n", "expects true or false"),
    ("py_duplicate_yaml", "yaml", "name: a\nname: b\n", "line 2: duplicate field 'name'"),
    ("py_duplicate_json", "json", '{"name": "a", "name": "b"}', "duplicate field 'name'"),
    ("py_list_for_map", "yaml", "parallel: [1, 2]\n", "expects a map, got a list"),
    ("py_list_top", "yaml", "- 1\n", "a job file is a map of fields"),
    ("py_yaml_syntax", "yaml", "name: [\n", "line "),
    ("py_nan", "json", '{"parallel": {"pipeline": NaN}}', "line 1, column 27: syntax error"),
    ("py_size", "yaml", "name: x\n" + "#" * (1 << 20), "the job-file size limit"),
    ("py_depth", "yaml", "a: " + "[" * 70 + "]" * 70 + "\n", "the job-file depth limit"),
    ("py_laughs", "yaml", "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 10) + "]\n"
        for i in range(8)), "the job-file expansion limit"),
    ("py_bad_number", "yaml", "name: x\nschedule: {kind: 1f1b}\ntrain: {lr: fast}\n",
     "line 3: field 'train.lr' expects a number, got 'fast'"),
]


def cases():
    with open(os.path.join(ROOT, "client", "testdata", "job_file_errors.json")) as f:
        shared = [(c["name"], c["format"], c["text"], c["expected"]) for c in json.load(f)]
    return shared + PYTHON_CASES


class JobFileAgreementTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.zpipe_bin = os.environ.get("ZPIPE_BIN")
        if not cls.zpipe_bin:
            raise unittest.SkipTest("set ZPIPE_BIN to the zpipe binary")
        cls.dir = tempfile.mkdtemp(prefix="zpipe-agreement-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, ignore_errors=True)

    def zpipe(self, source, text=None):
        """(exit code, stdout document, stderr) of the CLI reading `source`."""
        done = subprocess.run([self.zpipe_bin, "-o", "json", "submit", source, "--parse-only"],
                              input=text, capture_output=True, timeout=60)
        return done.returncode, json.loads(done.stdout), done.stderr.decode()

    def assert_same_error(self, name, source, spec, expected, text=None):
        code, printed, stderr = self.zpipe(source, text)
        self.assertEqual(code, 2, name)  # as `zpipe submit` exits for a refused job file
        self.assertEqual(stderr, f"zpipe submit: {printed['message']}\n", name)
        self.assertIn(expected, printed["message"], name)
        with self.assertRaises(ZeroPipeError, msg=name) as e:
            load_spec(spec)
        self.assertEqual(e.exception.message, printed["message"], name)
        self.assertEqual(e.exception.code, getattr(grpc.StatusCode, printed["code"]), name)

    def test_every_example_reads_the_same(self):
        names = []
        for folder, _, files in os.walk(os.path.join(ROOT, "examples")):
            names += [os.path.join(folder, n) for n in files if n.endswith((".yaml", ".json"))]
        self.assertGreaterEqual(len(names), 7)
        for path in sorted(names):
            code, printed, stderr = self.zpipe(path)
            self.assertEqual(code, 0, stderr)
            self.assertEqual(spec_to_dict(load_spec(path)), printed["spec"], path)
            # ... and as text, whose relative paths stay as written.
            with open(path, "rb") as f:
                text = f.read()
            code, printed, stderr = self.zpipe("-", text)
            self.assertEqual(code, 0, stderr)
            self.assertEqual(spec_to_dict(load_spec(text)), printed["spec"], path)

    def test_every_error_case_fails_the_same(self):
        for name, fmt, text, expected in cases():
            path = os.path.join(self.dir, f"{name}.{fmt}")
            with open(path, "w") as f:
                f.write(text)
            self.assert_same_error(name, path, path, expected)
            if fmt == "yaml" or text.lstrip().startswith("{"):  # what text on stdin reads as
                self.assert_same_error(name, "-", text, expected, text.encode())

    def test_files_that_cannot_be_read_fail_the_same(self):
        missing = os.path.join(self.dir, "missing.yaml")
        self.assert_same_error("missing", missing, missing, f"{missing}: cannot open the job file")
        path = os.path.join(self.dir, "latin1.yaml")
        with open(path, "wb") as f:
            f.write(b"name: caf\xe9\n")
        self.assert_same_error("not utf-8", path, path, "line 1: field 'name' is not UTF-8 text")


if __name__ == "__main__":
    unittest.main()
