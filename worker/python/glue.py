"""The Python half of a worker's Python models (worker/python): compiled into zpipe-worker and run
once in its embedded interpreter (interpreter.cc) as the module _zpipe_glue.

It loads a user's model file, calls its factory, finds the blocks ZeroPipe cuts into stages,
names their parameters by the whole model's state_dict keys, compiles blocks when the job asks
(model.python.compile: Model.compile), routes sys.stdout / sys.stderr to the worker's log, and
formats exceptions for failure reasons. Everything else (running blocks, B/W, the optimizer)
happens in C++ on the same tensors.
"""
import importlib.machinery
import importlib.util
import io
import itertools
import json
import os
import sys
import traceback
import warnings

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

    def label(self, k):
        return f"block {k} ('{self.names[k]}')"  # as the worker's errors name blocks

    def prepare_compile(self, kind, seq_len, batch, vocab):
        """Makes the example inputs compile() traces and checks each block on: token ids drawn
        from a generator of their own (the job's random streams are untouched) run through the
        eager blocks in eval mode, on the CPU, where every block is at load. Three microbatches
        per block: the one traced (batch samples), and two it is checked on, with other values
        (batch samples) and with another batch size (batch + 1, as a short last microbatch)."""
        self.compile_kind = kind
        gen = torch.Generator().manual_seed(0)
        xs = [(torch.randint(0, vocab, (n, seq_len), generator=gen),)
              for n in (batch, batch, batch + 1)]
        training = [b.training for b in self.blocks]
        self._examples = []
        try:
            with torch.no_grad():
                for k, block in enumerate(self.blocks):
                    block.eval()
                    self._examples.append(xs)
                    xs = [tuple(_tensors(block(*x))) for x in xs]
        finally:
            for block, mode in zip(self.blocks, training):
                block.train(mode)

    def compile(self, k):
        """(for training, for eval): block k compiled (torch.jit.trace or torch.jit.script) on the
        device its parameters are on, each checked against the eager forward. A trace records
        one pass through the forward's Python code, so dropout's training flag is in it: hence
        one per mode. Both share the block's parameters and buffers (the same tensors: the
        optimizer, checkpoints and export keep working on the module); after block.to(device)
        the buffers are new tensors, so the worker compiles again (python_blocks.cc). The random
        streams and the buffers (BatchNorm's running statistics) are as they were before."""
        block = self.blocks[k]
        device = next(itertools.chain(block.parameters(), block.buffers()),
                      torch.empty(0)).device
        examples = [tuple(x.to(device) for x in xs) for xs in self._examples[k]]
        cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else []
        was_training = block.training
        saved = [(b, b.detach().clone()) for b in block.buffers()]
        try:
            with torch.random.fork_rng(devices=cuda):
                compiled = tuple(self._compile(k, examples, training) for training in (True, False))
            verb = "traced" if self.compile_kind == "trace" else "scripted"
            print(f"model.python.compile: {self.compile_kind}: {self.label(k)} {verb} for "
                  f"training and eval on {device}, checked against its forward",
                  file=sys.stderr)
            return compiled
        finally:
            block.train(was_training)
            with torch.no_grad():
                for b, value in saved:
                    b.copy_(value)

    def _compile(self, k, examples, training):
        block, kind = self.blocks[k], self.compile_kind
        mode = "training" if training else "eval"
        what = f"{self.label(k)} in {mode} mode"  # after "model.python.compile: KIND: "
        advice = ("; drop model.python.compile to run the block's eager forward (exact, a "
                  "little slower)")
        block.train(training)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if kind == "trace":
                    compiled = torch.jit.trace(block, examples[0], check_trace=False,
                                               strict=False)
                else:
                    compiled = torch.jit.script(block)
            except Exception as e:  # noqa: BLE001 (whatever torch.jit raises, say so)
                raise ModelError(f"{what}: torch {torch.__version__} cannot {kind} it "
                                 f"({_first_line(e)}){advice}") from None
        compiled.train(training)
        if kind == "trace":
            _fold_sizes(compiled)
        hints = _tracer_hints(caught)
        why_differs = _PATH[kind]
        for x, why in zip(examples[1:], ("another microbatch of the same size",
                                         f"a microbatch of {len(examples[2][0])} samples")):
            try:
                with torch.no_grad():
                    torch.manual_seed(1)  # the same dropout draws for both
                    want = block(*x)
                    torch.manual_seed(1)
                    got = compiled(*x)
            except Exception as e:  # noqa: BLE001
                raise ModelError(f"{what} fails on {why} ({_first_line(e)}); "
                                 f"{why_differs}{hints}{advice}") from None
            diff = _difference(want, got)
            if diff:
                raise ModelError(f"{what} computes other values than its eager forward on "
                                 f"{why} ({diff}); {why_differs}{hints}{advice}")
        return compiled


# Why a compiled block can differ from its forward, per compile kind, for the errors above.
_PATH = {
    "trace": ("a trace records the one path the forward's Python code took on the traced "
              "microbatch, so control flow that depends on the tensors' values or on the batch "
              "size is frozen"),
    "script": ("a scripted block runs the forward as TorchScript, whose typing and semantics "
               "differ from Python's in places (integer and float arithmetic, in-place "
               "aliasing, what a call resolves to)"),
}


def _fold_sizes(traced):
    """Folds the size arithmetic a trace records on tensors back into integers, as in a scripted
    graph: `b, t = x.size(0), x.size(1)` then `x.reshape(b, t, ...)` traces as
    prim::NumToTensor and aten::Int pairs, a few microseconds each per call. These are the JIT's
    own meaning-preserving passes (inline, peephole, constant propagation, dead code), run on the
    forward graph before its first run; the check against the eager forward runs after them.
    Without these (private) passes in a torch, the graph stays as traced."""
    passes = ("_jit_pass_inline", "_jit_pass_peephole", "_jit_pass_constant_propagation",
              "_jit_pass_dce")
    if not all(hasattr(torch._C, name) for name in passes):
        return
    graph = traced.graph
    torch._C._jit_pass_inline(graph)
    torch._C._jit_pass_peephole(graph, True)
    torch._C._jit_pass_constant_propagation(graph)
    torch._C._jit_pass_dce(graph)


def _tensors(out):
    """A block's result as a list of tensors (one tensor, or a tuple's or list's)."""
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _first_line(e):
    """The exception in one line. The TorchScript interpreter's errors open with a generic line
    and a TorchScript traceback; the op's own error is their last line."""
    text = [line for line in str(e).strip().splitlines() if line.strip()]
    if not text:
        return type(e).__name__
    if text[0].startswith("The following operation failed in the TorchScript interpreter"):
        return text[-1].strip()[:300]
    return f"{type(e).__name__}: {text[0]}"[:300]


def _difference(want, got):
    """'' when the compiled block's result matches the eager one's, else what differs."""
    if isinstance(got, torch.Tensor) != isinstance(want, torch.Tensor) or \
            len(_tensors(got)) != len(_tensors(want)):
        return "a result of another structure"
    for i, (a, b) in enumerate(zip(_tensors(want), _tensors(got))):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return f"tensor {i}: {_shape(b)} where the forward gives {_shape(a)}"
        if a.is_floating_point():
            if not torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True):
                return f"tensor {i}: largest difference {(a - b).abs().max().item():.3g}"
        elif not torch.equal(a, b):
            return f"tensor {i}: other values"
    return ""


def _shape(t):
    if not isinstance(t, torch.Tensor):
        return f"a {type(t).__name__}"
    return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}"


def _tracer_hints(caught):
    """The model's lines torch.jit.trace warned about (a tensor turned into a Python bool or
    number: where a frozen path usually comes from), for an error; other warnings than the
    tracer's and torch.jit's deprecation notice are shown again."""
    lines = []
    for w in caught:
        if issubclass(w.category, torch.jit.TracerWarning):
            where = f"{os.path.basename(w.filename)}:{w.lineno}"
            if where not in lines:
                lines.append(where)
        elif "deprecated" not in str(w.message) or "torch.jit" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not lines:
        return ""
    more = f" and {len(lines) - 3} more" if len(lines) > 3 else ""
    return (f" (the tracer warned of a tensor turned into a Python value at "
            f"{', '.join(lines[:3])}{more})")


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
