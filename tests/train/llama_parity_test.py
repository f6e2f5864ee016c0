"""A Llama-style model (examples/llama/model.py: RMSNorm, rotary embeddings, causal
scaled_dot_product_attention with grouped-query heads, SwiGLU) trained by ZeroPipe (`zpipe run
--local`) and by a plain PyTorch loop from the same initial weights on the same token windows;
every iteration's loss and the exported parameters agree within 1e-5 relative, for each schedule
at p = 2 and p = 4 and for ZB-V with data parallelism (parity_harness.py holds the machinery).

8 blocks (embedding, 6 decoders, head): ZB-V p = 4 puts one block on each of its 8 stages, the
embedding and the head both on rank 0.

usage: llama_parity_test.py --zpipe BUILD/client/zpipe [-v] [LlamaParityTest.test_NAME]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "llama"))

import model as llama  # noqa: E402
import parity_harness as harness  # noqa: E402

M, B, SHUFFLE = 4, 2, 5


class LlamaParityTest(harness.ParityTestCase):
    @staticmethod
    def build():
        return llama.build(vocab=harness.VOCAB, hidden=32, heads=4, kv_heads=2, layers=6, seed=7)

    def test_1f1b_p2(self):
        self.run_case("llama-1f1b-p2", "1f1b", p=2, d=1, m=M, b=B, shuffle_seed=SHUFFLE)

    def test_zb2p_p2(self):
        self.run_case("llama-zb2p-p2", "zb-2p", p=2, d=1, m=M, b=B, shuffle_seed=SHUFFLE)

    def test_zbv_p2(self):
        self.run_case("llama-zbv-p2", "zb-v", p=2, d=1, m=M, b=B, shuffle_seed=SHUFFLE)

    def test_1f1b_p4(self):
        self.run_case("llama-1f1b-p4", "1f1b", p=4, d=1, m=M, b=B, shuffle_seed=SHUFFLE)

    def test_zb2p_p4(self):
        self.run_case("llama-zb2p-p4", "zb-2p", p=4, d=1, m=M, b=B, shuffle_seed=SHUFFLE)

    def test_zbv_p4(self):
        self.run_case("llama-zbv-p4", "zb-v", p=4, d=1, m=M, b=B, shuffle_seed=SHUFFLE)

    def test_zbv_p2_d2(self):
        self.run_case("llama-zbv-p2-d2", "zb-v", p=2, d=2, m=M, b=B, shuffle_seed=SHUFFLE)


if __name__ == "__main__":
    harness.main()
