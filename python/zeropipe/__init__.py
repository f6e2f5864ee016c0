"""zeropipe: helpers for bringing your own model and data to ZeroPipe.

Models: export_model scripts a torch.nn.Sequential of blocks, checks ZeroPipe's contract on a
sample batch (block 0 takes int64 token ids [b, L], every block takes one tensor and returns one
tensor, the last returns logits [b, L, V]) and saves it with torch.jit.save.

Data: write_tokens writes a flat little-endian token file (nanoGPT's train.bin layout);
window_index, batch and eval_batch read it in exactly the order a ZeroPipe run does
(worker/model/token_file.h states the contract), so a plain PyTorch loop reproduces a run.
"""
from zeropipe.export import ContractError, export_model
from zeropipe.tokens import (DTYPES, bytes_to_tokens, batch, eval_batch, n_windows, read_tokens,
                             shuffle_permutation, window_index, write_tokens)

__all__ = [
    "ContractError", "DTYPES", "batch", "bytes_to_tokens", "eval_batch", "export_model",
    "n_windows", "read_tokens", "shuffle_permutation", "window_index", "write_tokens",
]
