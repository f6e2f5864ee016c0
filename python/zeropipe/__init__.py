"""zeropipe: the Python side of ZeroPipe.

Client: a client of the coordinator's gRPC API (submit, status, list, wait, watch, cancel,
workers, trace; upload_artifact and submit(..., upload=True) send files), returning plain dicts with the names `zpipe` prints and raising ZeroPipeError.
It needs Debian's python3-grpcio and python3-protobuf (python3-yaml for zpipe's config file),
and reads job specs with the `zpipe` binary's job-file reader ($ZPIPE_BIN, else on PATH).

Models: export_model scripts a torch.nn.Sequential of blocks, checks ZeroPipe's contract on a
sample batch (block 0 takes int64 token ids [b, L], every block returns one tensor or a tuple the
next block takes as its arguments, the last returns logits [b, L, V] or (logits, aux)) and saves
it with torch.jit.save; run_blocks and loss_of run a model and compute its loss as ZeroPipe does.

Data: write_tokens writes a flat little-endian token file (nanoGPT's train.bin layout);
window_index, batch and eval_batch read it in exactly the order a ZeroPipe run does
(worker/model/token_file.h states the contract), so a plain PyTorch loop reproduces a run;
forward_seed gives the seed a worker draws a stage's dropout masks from.

Names are imported on first use, so the client works without torch and the model helpers
without gRPC.
"""
import importlib

_EXPORTS = {
    "Client": "zeropipe.client",
    "ZeroPipeError": "zeropipe.errors",
    "load_spec": "zeropipe.jobspec",
    "ContractError": "zeropipe.export",
    "export_model": "zeropipe.export",
    "loss_of": "zeropipe.export",
    "run_blocks": "zeropipe.export",
    "DTYPES": "zeropipe.tokens",
    "batch": "zeropipe.tokens",
    "bytes_to_tokens": "zeropipe.tokens",
    "eval_batch": "zeropipe.tokens",
    "forward_seed": "zeropipe.tokens",
    "n_windows": "zeropipe.tokens",
    "read_tokens": "zeropipe.tokens",
    "shuffle_permutation": "zeropipe.tokens",
    "window_index": "zeropipe.tokens",
    "write_tokens": "zeropipe.tokens",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zeropipe' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
