"""Several tensors across every pipeline cut, trained by ZeroPipe (`zpipe run --local`) against
a plain PyTorch loop (parity_harness.py holds the machinery).

TupleParityTest: 6 blocks. The embedding returns a tuple (hidden [b, L, H] float, mask [b, L]
bool, position ids [b, L] int64, rotary-style cache [L, H] float computed from a buffer: no
gradient, and no batch dimension); every later block takes the tuple as its arguments and passes
it on; block 2 adds an auxiliary loss (a float scalar that depends on parameters, so it crosses
the later cuts WITH a gradient) that blocks 3 and 4 carry along and the head returns with its
logits: (logits, aux), so the loss is cross-entropy + aux. Cuts [2, 3, 5]: the cut before block 2
carries four tensors of which one needs a gradient (the gradient wire is the hidden state's
gradient itself), the cuts before blocks 3 and 5 five tensors of which two do (hidden + aux: one
flat gradient). ZB-V and DualPipeV at p = 2 (the V turn-around), 1F1B at p = 2 with cut [3], and
ZB-V p = 2 d = 2: every iteration's loss and the exported weights agree with the plain loop
(zeropipe.run_blocks / loss_of) within 1e-5 relative. The eval loss (job spec `eval`, through the
executor's evaluation path) is the plain loop's eval-mode loss.

usage: tuple_parity_test.py --zpipe BUILD/client/zpipe [-v] [TupleParityTest.test_NAME]
"""
import os
import sys
from typing import Tuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import parity_harness as harness  # noqa: E402
import zeropipe  # noqa: E402

M, B, SHUFFLE = 4, 2, 3
H = 32


class Embed(torch.nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, width)
        self.register_buffer("inv_freq", 1.0 / (100.0 ** (torch.arange(width) / width)))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                torch.Tensor]:
        L = x.size(1)
        mask = x % 5 != 0  # bool, no gradient
        ids = torch.arange(L, device=x.device).unsqueeze(0).expand(x.size(0), L).contiguous()
        cache = torch.cos(torch.arange(L, dtype=torch.float32, device=x.device).unsqueeze(1) *
                          self.inv_freq.unsqueeze(0))  # [L, H], from a buffer: no gradient
        return self.tok(x), mask, ids, cache


class Mix(torch.nn.Module):
    """Uses every tensor it is given: the mask gates the update, the ids pick a position
    embedding, the cache modulates; a causal running mean mixes the tokens."""

    def __init__(self, width, seq_len):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.proj = torch.nn.Linear(width, width)
        self.pos = torch.nn.Embedding(seq_len, width)

    def update(self, h, mask, ids, cache):
        u = torch.tanh(self.proj(self.norm(h) * cache) + self.pos(ids))
        u = u * mask.unsqueeze(-1).to(u.dtype)
        steps = torch.arange(1, u.size(1) + 1, dtype=u.dtype, device=u.device).view(1, -1, 1)
        return h + u.cumsum(dim=1) / steps

    def forward(self, h: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor,
                cache: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                              torch.Tensor]:
        return self.update(h, mask, ids, cache), mask, ids, cache


class MixAux(Mix):
    """A Mix that starts an auxiliary loss (a MoE-style balance term stands in)."""

    def forward(self, h: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor,
                cache: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                              torch.Tensor, torch.Tensor]:
        y = self.update(h, mask, ids, cache)
        return y, mask, ids, cache, 0.05 * y.pow(2).mean()


class MixCarry(Mix):
    """A Mix that carries the auxiliary loss along and adds its own share."""

    def forward(self, h: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor,
                cache: torch.Tensor, aux: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor,
                                                                 torch.Tensor, torch.Tensor,
                                                                 torch.Tensor]:
        y = self.update(h, mask, ids, cache)
        return y, mask, ids, cache, aux + 0.02 * y.abs().mean()


class Head(torch.nn.Module):
    def __init__(self, width, vocab):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.out = torch.nn.Linear(width, vocab)

    def forward(self, h: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor,
                cache: torch.Tensor, aux: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.out(self.norm(h)), aux


class TupleParityTest(harness.ParityTestCase):
    @staticmethod
    def build():
        torch.manual_seed(17)
        L = harness.SEQ_LEN
        return torch.nn.Sequential(Embed(harness.VOCAB, H), Mix(H, L), MixAux(H, L),
                                   MixCarry(H, L), MixCarry(H, L), Head(H, harness.VOCAB))

    def test_zbv_p2(self):
        self.run_case("tuple-zbv-p2", "zb-v", p=2, d=1, m=M, b=B, shuffle_seed=SHUFFLE,
                      cuts=[2, 3, 5])

    def test_dualpipev_p2(self):
        self.run_case("tuple-dualpipev-p2", "dualpipe-v", p=2, d=1, m=M, b=B,
                      shuffle_seed=SHUFFLE, cuts=[2, 3, 5])

    def test_1f1b_p2(self):
        self.run_case("tuple-1f1b-p2", "1f1b", p=2, d=1, m=M, b=B, shuffle_seed=SHUFFLE,
                      cuts=[3])

    def test_zbv_p2_d2(self):
        self.run_case("tuple-zbv-p2-d2", "zb-v", p=2, d=2, m=M, b=B, shuffle_seed=SHUFFLE,
                      cuts=[2, 3, 5])

    def test_eval_loss(self):
        """Evaluation forwards (no graph) move the same packed tuples between ranks."""
        eval_path = os.path.join(self.dir, "eval.bin")
        with open("/usr/share/common-licenses/GPL-3", "rb") as f:
            zeropipe.write_tokens(list(f.read()[20000:26000]), eval_path, dtype="uint16")
        net = torch.jit.load(self.model_path)
        net.eval()
        with torch.no_grad():
            want = 0.0
            for k in range(2):
                x, y = zeropipe.eval_batch(eval_path, "uint16", harness.SEQ_LEN, k, B)
                want += zeropipe.loss_of(zeropipe.run_blocks(net, x), y).item() / 2
        spec = {
            "name": "tuple-eval",
            "model": {"torchscript": {"path": self.model_path, "cuts": [2, 3, 5]}},
            "data": {"path": self.tokens_path, "dtype": "uint16", "seq_len": harness.SEQ_LEN},
            "eval": {"path": eval_path, "every": 1, "batches": 2},
            "parallel": {"pipeline": 2, "data": 1},
            "schedule": {"kind": "zb-v"},
            "batch": {"microbatches": M, "microbatch_size": B},
            "train": {"iterations": 1, "optimizer": "sgd", "lr": 1e-30, "weight_decay": 0,
                      "seed": 1, "clip_grad_norm": 0},
        }
        summary = self.run_zpipe("tuple-eval", spec)
        evals = [e["loss"] for e in summary["eval_losses"]]
        self.assertTrue(evals, summary["eval_losses"])
        for got in evals:
            self.assertLess(abs(got - want) / want, harness.TOLERANCE,
                            f"eval loss {got}, plain loop {want}")


if __name__ == "__main__":
    harness.main()
