"""A small Llama-style decoder written as a torch.nn.Sequential of blocks, the shape ZeroPipe
trains (the contract of examples/own-model/model.py): block 0 takes int64 token ids [b, L], every
block takes and returns one tensor, the last block returns logits [b, L, V].

    Embed          token embedding (no position embedding: positions enter as rotations)
    Decoder x N    x + attn(rms_norm(x)), then x + swiglu(rms_norm(x)); attention is causal
                   scaled_dot_product_attention over rotary-embedded queries and keys, with
                   grouped-query attention when kv_heads < heads
    Head           final RMSNorm and the output projection

Export, as examples/own-model/prepare.py does for its model. Script with the project's Python
(scripts/find-python: the venv whose torch wheel is the worker's LibTorch), so the file's format
is one the worker reads; a file scripted by a newer torch fails the job saying so:

    py=$(scripts/find-python)
    $py - <<'EOF'
    import sys
    sys.path[:0] = ["python", "examples/llama"]
    import model, zeropipe
    net = model.build(vocab=256, hidden=64, heads=4, kv_heads=2, layers=4)
    zeropipe.export_model(net, "build/llama/model.pt", vocab=256)
    EOF

then train it like the own-model example (its job.yaml with model.torchscript.path pointing at
this file). tests/train/llama_parity_test.py trains it against a plain PyTorch loop.

Weight tying. tie_embeddings=True makes the head's projection the embedding's weight, as in Llama
3.2 1B/3B. ZeroPipe cannot train that: the embedding and the head are on different pipeline
stages (with ZB-V on different chunks of rank 0), each holding and stepping its own copy of the
weight, so the worker refuses a model whose blocks share a parameter, naming the blocks. The
option is there for plain PyTorch use; keep the default (untied) for ZeroPipe.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F


class Embed(nn.Module):
    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tok(ids)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Decoder(nn.Module):
    """One Llama decoder layer. The rotary angles are computed in forward from the sequence
    length (a handful of elementwise ops on [L, d]), so the block needs no buffer and works for
    any L."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn_hidden: int, eps: float,
                 rope_theta: float):
        super().__init__()
        if hidden % heads != 0 or heads % kv_heads != 0:
            raise ValueError(f"hidden {hidden} must be a multiple of heads {heads}, and heads a "
                             f"multiple of kv_heads {kv_heads}")
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = hidden // heads
        if self.head_dim % 2 != 0:
            raise ValueError(f"the head dimension {self.head_dim} must be even (rotary pairs)")
        self.rope_theta = rope_theta
        self.attn_norm = nn.RMSNorm(hidden, eps=eps)
        self.wq = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.ffn_norm = nn.RMSNorm(hidden, eps=eps)
        self.w1 = nn.Linear(hidden, ffn_hidden, bias=False)  # gate
        self.w3 = nn.Linear(hidden, ffn_hidden, bias=False)  # up
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=False)  # down

    def rope(self, t: int, x: torch.Tensor):
        """cos and sin [t, head_dim] of the rotary angles (rotate-half layout)."""
        d = self.head_dim
        inv_freq = 1.0 / (self.rope_theta ** (
            torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        angles = torch.outer(torch.arange(t, device=x.device, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.size(0), x.size(1)
        h = self.attn_norm(x)
        q = self.wq(h).reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).reshape(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).reshape(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rope(t, x)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attn.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Head(nn.Module):
    def __init__(self, hidden: int, vocab: int, eps: float):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=eps)
        self.out = nn.Linear(hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


def ffn_size(hidden: int, multiple_of: int = 16) -> int:
    """Llama's SwiGLU width: 2/3 of 4 * hidden, rounded up to a multiple of `multiple_of`."""
    width = int(2 * 4 * hidden / 3)
    return multiple_of * math.ceil(width / multiple_of)


def build(vocab: int = 256, hidden: int = 64, heads: int = 4, kv_heads: int = 0,
          layers: int = 4, ffn_hidden: int = 0, eps: float = 1e-5, rope_theta: float = 10000.0,
          tie_embeddings: bool = False, seed: int = 0) -> nn.Sequential:
    """Embed, `layers` Decoders and Head: layers + 2 blocks. kv_heads 0 = heads (no grouped-query
    attention); ffn_hidden 0 = ffn_size(hidden). Weights as torch's default initialisation under
    torch.manual_seed(seed). tie_embeddings: see the module docstring (ZeroPipe refuses it)."""
    torch.manual_seed(seed)
    kv_heads = kv_heads or heads
    ffn_hidden = ffn_hidden or ffn_size(hidden)
    net = nn.Sequential(Embed(vocab, hidden),
                        *[Decoder(hidden, heads, kv_heads, ffn_hidden, eps, rope_theta)
                          for _ in range(layers)],
                        Head(hidden, vocab, eps))
    if tie_embeddings:
        net[-1].out.weight = net[0].tok.weight
    return net
