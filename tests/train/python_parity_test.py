"""Python models, end to end: the transformer of examples/own-model, given to ZeroPipe as Python
(model.python: the workers run model.py's build() in their embedded interpreter; no export, no
TorchScript), trained by `zpipe run --local` (real coordinator and worker processes) and by a
plain PyTorch loop on the same module built the same way; every iteration's loss and the
exported state dict agree within 1e-5 relative, on 1F1B, ZB-2p, ZB-V and DualPipeV at p = 2,
ZB-2p, ZB-V and DualPipeV at p = 4, ZB-V with d = 2, and a run resumed from a checkpoint (ZB-V
p = 2 saved, 1F1B p = 4 resumed); and with model.python.compile: trace (the blocks traced), on
1F1B and ZB-V at p = 2 (parity_harness.py holds the machinery and the settings).

usage: python_parity_test.py --zpipe BUILD/client/zpipe [-v] [PythonParityTest.test_NAME]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(os.path.dirname(HERE))

import parity_harness as harness  # noqa: E402


class PythonParityTest(harness.PythonParityTestCase):
    model_file = os.path.join(ROOT, "examples", "own-model", "model.py")
    factory = "build"
    # build() seeds itself (seed 7); the blocks: Embed, 4 Blocks, Head.
    args = {"vocab": harness.VOCAB, "seq_len": harness.SEQ_LEN, "hidden": 32, "heads": 2,
            "layers": 4, "seed": 7}

    def test_1f1b_p2(self):
        self.run_case("py-1f1b-p2", "1f1b", p=2, d=1, m=4, b=2, cuts=[3])

    def test_zb2p_p2(self):
        self.run_case("py-zb2p-p2", "zb-2p", p=2, d=1, m=4, b=2)

    def test_zbv_p2(self):
        self.run_case("py-zbv-p2", "zb-v", p=2, d=1, m=4, b=2, cuts=[1, 3, 5])

    def test_dualpipev_p2(self):
        self.run_case("py-dualpipev-p2", "dualpipe-v", p=2, d=1, m=4, b=2, cuts=[2, 3, 4])

    def test_zb2p_p4(self):
        self.run_case("py-zb2p-p4", "zb-2p", p=4, d=1, m=4, b=2, shuffle_seed=5,
                      cuts=[2, 3, 4])

    def test_zbv_p2_d2(self):
        self.run_case("py-zbv-p2-d2", "zb-v", p=2, d=2, m=4, b=2, cuts=[1, 3, 5])

    def test_resume_zbv_p2_as_1f1b_p4(self):
        # A Python model's checkpoint (4 stages) resumed by 1F1B at p = 4 (4 stages too).
        self.run_resume_case("py-resume", "zb-v", p=2, d=1, m=4, b=2, cuts=[1, 3, 5], every=3,
                             resume_schedule="1f1b", resume_p=4)


class PythonParityP4Test(harness.PythonParityTestCase):
    """The V schedules at p = 4 need 8 stages: the same transformer with 6 Blocks (8 blocks)."""
    model_file = PythonParityTest.model_file
    factory = "build"
    args = dict(PythonParityTest.args, layers=6)

    def test_zbv_p4(self):
        self.run_case("py-zbv-p4", "zb-v", p=4, d=1, m=8, b=2, cuts=[1, 2, 3, 4, 5, 6, 7])

    def test_dualpipev_p4(self):
        self.run_case("py-dualpipev-p4", "dualpipe-v", p=4, d=1, m=8, b=2,
                      cuts=[1, 2, 3, 4, 5, 6, 7])


class PythonTraceParityTest(harness.PythonParityTestCase):
    """model.python.compile: trace: the workers run torch.jit.trace of every block (F in C++, B
    and W the same split on its graph); the plain loop runs the eager module. Losses and the
    exported state dict (the module's own parameters, which the traces share) agree as above."""
    model_file = PythonParityTest.model_file
    factory = "build"
    args = PythonParityTest.args
    compile = "trace"

    def test_trace_1f1b_p2(self):
        self.run_case("py-trace-1f1b-p2", "1f1b", p=2, d=1, m=4, b=2, cuts=[3])

    def test_trace_zbv_p2(self):
        self.run_case("py-trace-zbv-p2", "zb-v", p=2, d=1, m=4, b=2, cuts=[1, 3, 5])


if __name__ == "__main__":
    harness.main()
