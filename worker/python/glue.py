"""The Python half of a worker's Python models (worker/python): compiled into zpipe-worker and run
once in its embedded interpreter (interpreter.cc) as the module _zpipe_glue.

It loads a user's model file, calls its factory, finds the blocks ZeroPipe cuts into stages,
names their parameters by the whole model's state_dict keys, routes sys.stdout / sys.stderr to
the worker's log, and formats exceptions for failure reasons. Everything else (running blocks,
B/W, the optimizer) happens in C++ on the same tensors.
"""
import importlib.machinery
import importlib.util
import io
import itertools
import json
import os
import sys
import traceback

import torch

_loads = itertools.count()
GLUE_FILE = "<zeropipe glue>"  # the name interpreter.cc compiles this source under


class ModelError(Exception):
    """The model breaks the Python model contract; the message says how (no traceback)."""


class _Lines(io.TextIOBase):
    """sys.stdout or sys.stderr of the worker: each complete line goes to `emit` (the worker's
    log); a partial line waits for its newline or flush()."""

    def __init__(self, emit, name):
        super().__init__()
        self._emit = emit
        self._name = name
        self._pending = ""

    @property
    def name(self):
        return self._name

    @property
    def encoding(self):
        return "utf-8"

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, text):
        *lines, self._pending = (self._pending + str(text)).split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self):
        if self._pending:
            line, self._pending = self._pending, ""
            self._emit(line)


def install_output(emit):
    sys.stdout = _Lines(emit, "<stdout>")
    sys.stderr = _Lines(emit, "<stderr>")


def _ours(frame):
    """Frames of this glue and of nn.Module's call machinery: noise in a failure reason."""
    return frame.filename == GLUE_FILE or frame.filename.endswith(
        os.path.join("torch", "nn", "modules", "module.py"))


def describe(exc, frames):
    """(short, full): the exception with the last `frames` frames of its traceback that are the
    model's (for a failure reason), and with the whole traceback (for the log)."""
    if isinstance(exc, ModelError):
        return str(exc), str(exc)
    tb = [f for f in traceback.extract_tb(exc.__traceback__) if not _ours(f)]
    only = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip("\n")
    if not tb:
        return only, full
    cut = "" if len(tb) <= frames else f", last {frames} frames"
    lines = [f"Traceback (most recent call last{cut}):"]
    for f in tb[-frames:]:
        lines.append(f'  File "{f.filename}", line {f.lineno}, in {f.name}')
        if f.line:
            lines.append(f"    {f.line.strip()}")
    return "\n".join(lines + [only]), full


def _blocks(model, factory):
    """[(name, block)]: model.stages() if it has one, else an nn.Sequential's children."""
    if callable(getattr(model, "stages", None)):
        blocks, source = list(model.stages()), f"{type(model).__name__}.stages()"
    elif isinstance(model, torch.nn.Sequential):
        blocks, source = list(model.children()), "the nn.Sequential"
    else:
        raise ModelError(
            f"{factory}() returned a {type(model).__name__}, and ZeroPipe cannot tell its "
            "blocks: return a torch.nn.Sequential of the blocks, or give the module a stages() "
            "method that returns them in order")
    if not blocks:
        raise ModelError(f"{source} holds no blocks")
    names = {}
    for name, module in model.named_modules():
        names.setdefault(id(module), name)
    out = []
    for k, block in enumerate(blocks):
        if not isinstance(block, torch.nn.Module):
            raise ModelError(f"block {k} of {source} is a {type(block).__name__}, not a "
                             "torch.nn.Module")
        out.append((names.get(id(block)) or str(k), block))
    return out


class Model:
    """A loaded model: the factory's module and its blocks."""

    def __init__(self, path, factory, model):
        self.model = model
        named = _blocks(model, factory)
        self.names = [name for name, _ in named]
        self.blocks = [block for _, block in named]
        self._keys = {}
        for name, p in model.named_parameters():
            self._keys.setdefault(id(p), name)
        in_blocks = {id(p) for b in self.blocks for p in b.parameters()}
        left = [name for name, p in model.named_parameters() if id(p) not in in_blocks]
        if left:
            print(f"zeropipe: {path}: {len(left)} parameter(s) are in no block and are not "
                  f"trained: {', '.join(left[:5])}{' ...' if len(left) > 5 else ''}",
                  file=sys.stderr)

    def parameters(self, k):
        """Block k's parameters as (state_dict key of the whole model, tensor); a parameter the
        model itself does not hold is named after its block."""
        return [(self._keys.get(id(p)) or f"{self.names[k]}.{name}", p)
                for name, p in self.blocks[k].named_parameters()]

    def buffers(self, k):
        return list(self.blocks[k].buffers())


def load(path, factory, args_json, seed):
    """Runs the file `path` as a fresh module, then factory(**args) after torch.manual_seed(seed),
    so every worker builds the same initial weights (a plain loop does the same to compare)."""
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)  # the model's own modules beside it, as `python model.py`
    name = f"zpipe_model_{next(_loads)}"
    # A source loader whatever the file is called: an uploaded model is cached under its digest.
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    build = getattr(module, factory, None)
    if not callable(build):
        raise ModelError(f"{path} defines no function {factory}() (model.python.factory)")
    args = json.loads(args_json) if args_json else {}
    if not isinstance(args, dict):
        raise ModelError("model.python.args must be a map of keyword arguments")
    torch.manual_seed(seed)
    model = build(**args)
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"{factory}() returned a {type(model).__name__}, not a torch.nn.Module")
    return Model(path, factory, model)
