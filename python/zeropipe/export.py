"""export_model: a torch.nn.Sequential of blocks to a TorchScript file ZeroPipe can train.

ZeroPipe cuts the Sequential into pipeline stages at block boundaries, so every block must be a
stage on its own: block 0 takes int64 token ids [b, L]; every block takes one tensor and returns
one tensor whose first dimension is still the batch b; the last block returns logits [b, L, V].
export_model checks that on a sample batch before saving, so a violation is reported here, naming
the block, rather than on a worker mid-run.
"""
import os

import torch


class ContractError(ValueError):
    """The model breaks ZeroPipe's block contract; the message names the block and what was
    wrong."""


def _name(k, block):
    return f"block {k} ({type(block).__name__})"


def _describe(x):
    if torch.is_tensor(x):
        return f"{x.dtype} tensor {list(x.shape)}"
    return type(x).__name__


def _check_signature(name, scripted):
    schema = scripted.forward.schema
    required = [a for a in schema.arguments[1:] if not a.has_default_value()]
    if len(required) != 1 or str(required[0].type) != "Tensor":
        got = ", ".join(f"{a.name}: {a.type}" for a in required) or "nothing"
        raise ContractError(f"{name}: forward takes ({got}); a block takes exactly one tensor "
                            "(further arguments need defaults)")
    returns = [str(r.type) for r in schema.returns]
    if returns != ["Tensor"]:
        raise ContractError(f"{name}: forward returns {', '.join(returns) or 'nothing'}; "
                            "a block returns exactly one tensor")


def export_model(module, path, sample=None, vocab=None):
    """Scripts `module` (a torch.nn.Sequential) with torch.jit.script, checks the block contract
    on `sample` (int64 token ids [b, L]; by default [2, 8] ids drawn below `vocab`), and saves it
    with torch.jit.save to `path`. If vocab is given the logits' last dimension must equal it.
    Raises ContractError (a ValueError) naming the block that breaks the contract, TypeError if
    module is not a Sequential. Returns path."""
    if not isinstance(module, torch.nn.Sequential):
        raise TypeError(f"export_model: the model must be a torch.nn.Sequential of blocks, got "
                        f"{type(module).__name__}; put the embedding, the blocks and the head "
                        "in one nn.Sequential")
    if len(module) == 0:
        raise ContractError("export_model: the Sequential has no blocks")
    if sample is None:
        if vocab is None:
            raise ValueError("export_model: pass sample= (int64 token ids [b, L]) or vocab= "
                             "(a sample [2, 8] is drawn below it)")
        sample = torch.randint(0, vocab, (2, 8), dtype=torch.int64)
    if not torch.is_tensor(sample) or sample.dtype != torch.int64 or sample.dim() != 2:
        raise ValueError(f"export_model: sample must be int64 token ids [b, L], got "
                         f"{_describe(sample)}")
    if vocab is not None and sample.numel() and (sample.min() < 0 or sample.max() >= vocab):
        raise ValueError(f"export_model: sample ids must be in [0, {vocab})")

    scripted = []
    for k, block in enumerate(module):
        try:
            s = torch.jit.script(block)
        except Exception as e:  # TorchScript reports many error types
            raise ContractError(f"{_name(k, block)}: torch.jit.script failed: {e}") from e
        _check_signature(_name(k, block), s)
        scripted.append(s)

    b, L = sample.shape
    x = sample
    with torch.no_grad():
        for k, (block, s) in enumerate(zip(module, scripted)):
            try:
                y = s(x)
            except Exception as e:
                role = "; block 0 takes int64 token ids [b, L]" if k == 0 else ""
                raise ContractError(f"{_name(k, block)}: fails on its input "
                                    f"({_describe(x)}{role}): {e}") from e
            if not torch.is_tensor(y):
                raise ContractError(f"{_name(k, block)}: returned {_describe(y)}, not a tensor")
            if y.dim() < 1 or y.shape[0] != b:
                raise ContractError(f"{_name(k, block)}: returned {_describe(y)}; the first "
                                    f"dimension must stay the batch ({b})")
            x = y
    last = _name(len(module) - 1, module[len(module) - 1])
    if x.dim() != 3 or tuple(x.shape[:2]) != (b, L) or not x.is_floating_point():
        raise ContractError(f"{last}: the last block must return float logits [b, L, V] = "
                            f"[{b}, {L}, V], got {_describe(x)}")
    if vocab is not None and x.shape[2] != vocab:
        raise ContractError(f"{last}: returns logits over {x.shape[2]} tokens, but vocab is "
                            f"{vocab}")

    torch.jit.save(torch.jit.script(module), os.fspath(path))
    return path
