"""export_model: a torch.nn.Sequential of blocks to a TorchScript file ZeroPipe can train.

ZeroPipe cuts the Sequential into pipeline stages at block boundaries, so every block must be a
stage on its own: block 0 takes int64 token ids [b, L]; every block returns one tensor or a tuple
of tensors, which the next block takes as its positional arguments (hidden state, attention mask,
position ids, a rotary cache...); a tensor returned alone keeps the batch b as its first
dimension; the last block returns logits [b, L, V], or (logits, aux) with aux a float scalar that
is added to the cross-entropy loss (an auxiliary loss). export_model checks that on a sample batch
before saving, so a violation is reported here, naming the block, rather than on a worker mid-run.

torch.nn.Sequential itself cannot chain tuples (nor can TorchScript script it then); a model
whose blocks pass tuples is saved with the same children (the same state_dict keys) but without a
forward of its own: run it with run_blocks.
"""
import collections
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
    if not required or any(str(a.type) != "Tensor" for a in required):
        got = ", ".join(f"{a.name}: {a.type}" for a in required) or "nothing"
        raise ContractError(f"{name}: forward takes ({got}); a block takes tensors (the previous "
                            "block's output; further arguments need defaults)")
    returns = [str(r.type) for r in schema.returns]
    if len(returns) != 1 or not (returns[0] == "Tensor" or (
            returns[0].startswith("Tuple[") and
            all(t.strip() == "Tensor" for t in returns[0][6:-1].split(",")))):
        raise ContractError(f"{name}: forward returns {', '.join(returns) or 'nothing'}; "
                            "a block returns one tensor or a tuple of tensors")


def _count(n):
    return "one tensor" if n == 1 else f"a tuple of {n} tensors"


def _check_arity(k, module, scripted, n):
    """Block k must take the n tensors the previous block returns as its arguments."""
    args = scripted.forward.schema.arguments[1:]
    required = [a for a in args if not a.has_default_value()]
    if len(required) <= n <= len(args):
        return
    takes = ", ".join(f"{a.name}: {a.type}" for a in args)
    prev = "the token ids" if k == 0 else _name(k - 1, module[k - 1])
    count = "one tensor" if len(args) == 1 else f"{len(required)} tensors"
    raise ContractError(f"{_name(k, module[k])}: takes {count} ({takes}) but {prev} returns "
                        f"{_count(n)}; a block takes the previous block's tensors as its "
                        "positional arguments")


def _as_tuple(y):
    return tuple(y) if isinstance(y, tuple) else (y,)


def run_blocks(model, tokens, cuts=None, seeds=None):
    """Runs `model`'s blocks (model.stages() when it has one, as for a Python model; else its
    children, in order) on int64 token ids the way ZeroPipe does: a tuple a block returns becomes
    the next block's positional arguments. Returns the last block's output: logits, or (logits,
    aux). Works on the nn.Sequential, on the loaded file and on a Python model's module.

    With `cuts` (the job's model cuts: stage k runs blocks cuts[k-1] to cuts[k] - 1) and `seeds`
    (one per stage), torch.manual_seed(seeds[k]) runs before stage k's first block, as a worker
    seeds each forward: with seeds[k] = forward_seed(train.seed, t, r, k, i) a model with
    dropout draws the masks microbatch i of iteration t on data rank r drew in the run."""
    stages = getattr(model, "stages", None)
    blocks = list(stages() if callable(stages) else model.children())
    starts = {}
    if seeds is not None:
        bounds = [0] + list(cuts or [])
        if len(bounds) != len(seeds):
            raise ValueError(f"{len(seeds)} seeds for {len(bounds)} stages (cuts {cuts})")
        starts = dict(zip(bounds, seeds))
    x = (tokens,)
    for k, block in enumerate(blocks):
        if k in starts:
            torch.manual_seed(starts[k])
        x = _as_tuple(block(*x))
    return x[0] if len(x) == 1 else x


def loss_of(output, targets):
    """ZeroPipe's loss of a microbatch from the last block's output: the mean cross-entropy of
    the logits over every token, plus aux when the last block returns (logits, aux)."""
    logits, aux = (output, None) if torch.is_tensor(output) else output
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                             targets.reshape(-1))
    return loss if aux is None else loss + aux.reshape(())


class _Blocks(torch.nn.Sequential):
    """The Sequential's children, saved without a forward (TorchScript cannot script a loop whose
    variable changes type): ZeroPipe only reads the children; run_blocks runs them."""

    @torch.jit.ignore
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_blocks(self, x)


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
    x = (sample,)
    tuples = False
    with torch.no_grad():
        for k, (block, s) in enumerate(zip(module, scripted)):
            _check_arity(k, module, s, len(x))
            try:
                y = s(*x)
            except Exception as e:
                role = "; block 0 takes int64 token ids [b, L]" if k == 0 else ""
                got = ", ".join(_describe(t) for t in x)
                raise ContractError(f"{_name(k, block)}: fails on its input "
                                    f"({got}{role}): {e}") from e
            y = _as_tuple(y)
            if not y or not all(torch.is_tensor(t) for t in y):
                raise ContractError(f"{_name(k, block)}: returned "
                                    f"{', '.join(_describe(t) for t in y)}, not tensors")
            if len(y) == 1 and (y[0].dim() < 1 or y[0].shape[0] != b):
                raise ContractError(f"{_name(k, block)}: returned {_describe(y[0])}; the first "
                                    f"dimension must stay the batch ({b})")
            tuples = tuples or len(y) > 1
            x = y
    last = _name(len(module) - 1, module[len(module) - 1])
    if len(x) > 2 or (len(x) == 2 and (not x[1].is_floating_point() or x[1].numel() != 1)):
        raise ContractError(f"{last}: the last block must return logits, or (logits, aux) with "
                            f"aux a float scalar; got {', '.join(_describe(t) for t in x)}")
    x = x[0]
    if x.dim() != 3 or tuple(x.shape[:2]) != (b, L) or not x.is_floating_point():
        raise ContractError(f"{last}: the last block must return float logits [b, L, V] = "
                            f"[{b}, {L}, V], got {_describe(x)}")
    if vocab is not None and x.shape[2] != vocab:
        raise ContractError(f"{last}: returns logits over {x.shape[2]} tokens, but vocab is "
                            f"{vocab}")

    if tuples:
        module = _Blocks(collections.OrderedDict(module.named_children()))
    torch.jit.save(torch.jit.script(module), os.fspath(path))
    return path
