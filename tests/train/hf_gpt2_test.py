"""A real model from a real library: the Hugging Face transformers GPT-2 of examples/hf-gpt2 (built
from a tiny GPT2Config, no download; its GPT2Blocks as stages), trained by ZeroPipe as a Python
model with `zpipe run --local` and by a plain PyTorch loop on the same module: every iteration's
loss and the exported state dict agree within 1e-5 relative (ZB-V p = 2, 1F1B p = 4, ZB-2p p = 2
with d = 2; and ZB-V p = 2 with the blocks traced, model.python.compile: trace). The stages are
GPT-2 itself (their chain gives GPT2LMHeadModel's logits), and the
exported state dict loads into a stock GPT2LMHeadModel, strict.

usage: hf_gpt2_test.py --zpipe BUILD/client/zpipe [-v] [HfGpt2Test.test_NAME]
"""
import importlib.util
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(os.path.dirname(HERE))

import torch  # noqa: E402

import parity_harness as harness  # noqa: E402
import zeropipe  # noqa: E402

MODEL_FILE = os.path.join(ROOT, "examples", "hf-gpt2", "model.py")
# The tiny config: 2 blocks, so 4 pipeline blocks (embeddings, 2 GPT2Blocks, head).
ARGS = {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64,
        "n_positions": harness.SEQ_LEN}


def example():
    spec = importlib.util.spec_from_file_location("hf_gpt2_model", MODEL_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class HfGpt2Test(harness.PythonParityTestCase):
    model_file = MODEL_FILE
    factory = "build_model"
    args = ARGS
    token_vocab = 64

    def test_stages_are_gpt2_itself(self):
        net = self.reference_net()
        ids = torch.randint(64, (2, harness.SEQ_LEN))
        staged = zeropipe.run_blocks(net, ids)
        self.assertEqual((staged - net(ids).logits).abs().max().item(), 0.0)

    def test_zbv_p2(self):
        summary = self.run_case("gpt2-zbv-p2", "zb-v", p=2, d=1, m=4, b=2)
        self.check_export_loads_into_gpt2(summary["model"]["file"])

    def test_1f1b_p4(self):
        self.run_case("gpt2-1f1b-p4", "1f1b", p=4, d=1, m=4, b=2, cuts=[1, 2, 3])

    def test_zb2p_p2_d2(self):
        self.run_case("gpt2-zb2p-p2-d2", "zb-2p", p=2, d=2, m=2, b=2, cuts=[2])

    def check_export_loads_into_gpt2(self, model_file):
        from transformers import GPT2LMHeadModel
        state = torch.load(model_file)
        stock = GPT2LMHeadModel(example().config(**ARGS))
        stock.load_state_dict(state, strict=True)
        _, want = self.reference(1, 4, 2, None)
        for key, value in want.items():
            self.assertTrue(torch.allclose(stock.state_dict()[key], value, rtol=0, atol=1e-5), key)


class HfGpt2TraceTest(harness.PythonParityTestCase):
    """The same GPT-2 with model.python.compile: trace: each worker traces the library's own
    GPT2Blocks (the tracer warns about SDPA's shape checks; the check against the eager forward
    passes) and runs the traces; the cuts come from profiling the traced blocks. The export still
    loads into a stock GPT2LMHeadModel."""
    model_file = MODEL_FILE
    factory = "build_model"
    args = ARGS
    token_vocab = 64
    compile = "trace"

    def test_trace_zbv_p2(self):
        summary = self.run_case("gpt2-trace-zbv-p2", "zb-v", p=2, d=1, m=4, b=2)
        HfGpt2Test.check_export_loads_into_gpt2(self, summary["model"]["file"])


if __name__ == "__main__":
    harness.main()
