"""Train your own model, end to end: the GPT-style transformer of examples/own-model trained by
ZeroPipe (`zpipe run --local`) and by a plain PyTorch loop from the same initial weights on the
same token windows; every iteration's loss and the exported parameters agree within 1e-5 relative
(parity_harness.py holds the machinery and the training settings).

usage: parity_test.py --zpipe BUILD/client/zpipe [-v] [TrainParityTest.test_NAME]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "own-model"))

import model as own_model  # noqa: E402
import parity_harness as harness  # noqa: E402


class TrainParityTest(harness.ParityTestCase):
    @staticmethod
    def build():
        return own_model.build(vocab=harness.VOCAB, seq_len=harness.SEQ_LEN, hidden=32, heads=2,
                               layers=4, seed=7)

    def test_zbv_p2(self):
        self.run_case("zbv-p2", "zb-v", p=2, d=1, m=4, b=2)

    def test_zb2p_p4(self):
        self.run_case("zb2p-p4", "zb-2p", p=4, d=1, m=4, b=2, shuffle_seed=5)

    def test_1f1b_p2_d2(self):
        self.run_case("1f1b-p2-d2", "1f1b", p=2, d=2, m=2, b=2)


if __name__ == "__main__":
    harness.main()
