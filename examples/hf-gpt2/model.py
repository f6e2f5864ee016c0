"""A Hugging Face transformers GPT-2, trained by ZeroPipe as a Python model (docs/guide.md "Python
models"): no TorchScript, no export step, the library's own modules.

build_model(**args) builds GPT2LMHeadModel from a small GPT2Config (no download: random initial
weights, which ZeroPipe seeds with train.seed on every worker) and gives it stages(): the token and
position embeddings, each GPT2Block as it is, and the final LayerNorm with the LM head. ZeroPipe
cuts those blocks into pipeline stages. Every parameter keeps its GPT2LMHeadModel name
("transformer.h.0.attn.c_attn.weight"), so the state dict ZeroPipe exports loads into a stock
GPT2LMHeadModel of the same config (sample.py).

Two settings differ from GPT-2's defaults, both for pipelines: the LM head is not tied to the
token embedding (tie_word_embeddings=False; the two live on different stages, and ZeroPipe refuses
a weight shared across stages), and attention is PyTorch's SDPA, which is causal by itself when no
mask is passed, as HF's GPT2Model arranges too. Dropout is off by default so that runs compare
exactly with a plain loop; pass dropout=0.1 for GPT-2's.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a config, not a download

import torch  # noqa: E402
from torch import nn  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402


class Embed(nn.Module):
    """GPT2Model's first step: token + position embeddings, then dropout."""

    def __init__(self, transformer):
        super().__init__()
        self.wte, self.wpe, self.drop = transformer.wte, transformer.wpe, transformer.drop

    def forward(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device)
        return self.drop(self.wte(ids) + self.wpe(positions))


class Head(nn.Module):
    """The final LayerNorm and the LM head: logits [b, L, V]."""

    def __init__(self, ln_f, lm_head):
        super().__init__()
        self.ln_f, self.lm_head = ln_f, lm_head

    def forward(self, hidden):
        return self.lm_head(self.ln_f(hidden))


class GPT2Stages(GPT2LMHeadModel):
    """GPT2LMHeadModel, unchanged, plus the blocks ZeroPipe cuts into pipeline stages."""

    def stages(self):
        t = self.transformer
        return [Embed(t), *t.h, Head(t.ln_f, self.lm_head)]


def config(n_layer=4, n_embd=64, n_head=4, vocab_size=256, n_positions=64, dropout=0.0):
    return GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab_size,
                      n_positions=n_positions, resid_pdrop=dropout, embd_pdrop=dropout,
                      attn_pdrop=dropout, tie_word_embeddings=False, bos_token_id=0,
                      eos_token_id=0, attn_implementation="sdpa")


def build_model(**args):
    return GPT2Stages(config(**args))
