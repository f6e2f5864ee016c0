"""Token files and the order ZeroPipe reads them in: the contract of worker/model/token_file.h,
kept exactly so that a plain PyTorch loop reads the tokens a ZeroPipe run read.

A token file is a flat array of little-endian token ids, dtype uint16 or uint32 (nanoGPT's
train.bin). L = seq_len. Window k is tokens [k*L, k*L + L + 1): inputs its first L, targets its
last L; a file of n tokens has N = (n - 1) // L windows.

Iteration t, data-parallel rank r of d, microbatch i of m, row j of b reads the global sample
g = (((t*d + r)*m + i)*b + j): window g % N without a shuffle seed; with seed s, window
shuffle_permutation(s, g // N, N)[g % N]. Eval batch k, row j reads window (k*b + j) % N_eval.
Its dropout masks come from forward_seed(train.seed, t, r, stage, i), one per stage.
"""
import functools
import os

import numpy as np
import torch

# The file formats, by the name the job spec uses.
DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB


def _mix(z):
    """splitmix64's output function on one Python int, modulo 2**64."""
    z = ((z ^ (z >> 30)) * _C1) & _MASK
    z = ((z ^ (z >> 27)) * _C2) & _MASK
    return z ^ (z >> 31)


def _mix_array(z):
    """_mix on a numpy uint64 array (numpy's uint64 arithmetic wraps modulo 2**64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_C1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_C2)
    return z ^ (z >> np.uint64(31))


def forward_seed(seed, iteration, data_rank, stage, microbatch):
    """The seed a ZeroPipe worker gives the random generators before the forward of `stage` for
    `microbatch` of `iteration` on data rank `data_rank`, in a job whose train.seed is `seed`
    (worker/model/stage.h: ForwardSeed, splitmix64 over the five). torch.manual_seed of it before
    that stage's blocks (run_blocks' `seeds`) makes dropout draw the masks the run drew."""
    def splitmix64(x):
        return _mix((x + _GAMMA) & _MASK)

    h = splitmix64((seed ^ 0xD40F5EED) & _MASK)
    for v in (iteration, data_rank, stage, microbatch):
        h = splitmix64(h ^ (v & 0xFFFFFFFF))
    return h


@functools.lru_cache(maxsize=2)
def _permutation(seed, pass_, n):
    state = _mix((_mix(seed & _MASK) + pass_) & _MASK)
    if n < 2:
        return tuple(range(n))
    # next() for the k-th swap (k = n-1 down to 1) is mix(state + c * GAMMA), c = n - k.
    with np.errstate(over="ignore"):
        counts = np.arange(1, n, dtype=np.uint64)
        states = counts * np.uint64(_GAMMA) + np.uint64(state)
        ks = np.arange(n - 1, 0, -1, dtype=np.uint64)
        js = (_mix_array(states) % (ks + np.uint64(1))).tolist()
    perm = list(range(n))
    for k, j in zip(range(n - 1, 0, -1), js):
        perm[k], perm[j] = perm[j], perm[k]
    return tuple(perm)


def shuffle_permutation(seed, pass_, n):
    """The permutation of windows 0..n-1 for pass `pass_` over the data with shuffle seed `seed`.

    All arithmetic on unsigned 64-bit integers modulo 2**64:
      mix(z): z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
              return z ^ (z >> 31)
      next(): state += 0x9E3779B97F4A7C15; return mix(state)        (splitmix64)
      state = mix(mix(seed) + pass); perm = [0, ..., n-1]
      for k = n-1 down to 1: j = next() % (k + 1); swap perm[k], perm[j]   (Fisher-Yates)
    Returns a tuple; the two most recently used permutations are cached.
    """
    if n < 0 or pass_ < 0:
        raise ValueError(f"shuffle_permutation: n {n} and pass {pass_} must be >= 0")
    return _permutation(int(seed) & _MASK, int(pass_), int(n))


def window_index(t, r, i, j, d, m, b, n_windows, shuffle_seed=None):
    """The window that row j of microbatch i of iteration t on data-parallel rank r reads, with d
    ranks, m microbatches per iteration and rank, b rows per microbatch, over n_windows windows."""
    for name, value, bound in (("r", r, d), ("i", i, m), ("j", j, b)):
        if not 0 <= value < bound:
            raise ValueError(f"window_index: {name} = {value} not in [0, {bound})")
    if t < 0 or n_windows < 1:
        raise ValueError(f"window_index: need t >= 0 and n_windows >= 1 (t {t}, n {n_windows})")
    g = (((t * d + r) * m + i) * b + j)
    if shuffle_seed is None:
        return g % n_windows
    return shuffle_permutation(shuffle_seed, g // n_windows, n_windows)[g % n_windows]


def read_tokens(path, dtype):
    """Memory-maps a token file read-only: a 1-D numpy array of its ids. FileNotFoundError if it
    is missing; ValueError for an unknown dtype or a size not a multiple of the dtype's. Errors
    name the file, as ZeroPipe's do."""
    if dtype not in DTYPES:
        raise ValueError(f"token file '{path}': unknown dtype '{dtype}'; use uint16 or uint32")
    if not os.path.exists(path):
        raise FileNotFoundError(f"token file '{path}': no such file")
    size, width = os.path.getsize(path), DTYPES[dtype].itemsize
    if size % width:
        raise ValueError(f"token file '{path}': size {size} bytes is not a multiple of {width} "
                         f"(dtype {dtype}); is the dtype right, or the file truncated?")
    if size == 0:
        return np.zeros(0, dtype=DTYPES[dtype])
    return np.memmap(path, dtype=DTYPES[dtype], mode="r")


def n_windows(path, dtype, seq_len):
    """N = (n_tokens - 1) // seq_len; ValueError naming the file if that is 0."""
    tokens = read_tokens(path, dtype)
    return _windows(path, tokens, seq_len)


def _windows(path, tokens, seq_len):
    if seq_len < 1:
        raise ValueError(f"token file '{path}': seq_len {seq_len} < 1")
    n = max(len(tokens) - 1, 0) // seq_len
    if n == 0:
        raise ValueError(f"token file '{path}' holds {len(tokens)} tokens: fewer than "
                         f"seq_len + 1 = {seq_len + 1} needed for one window")
    return n


def _gather(tokens, seq_len, windows):
    rows = np.stack([np.asarray(tokens[w * seq_len:w * seq_len + seq_len + 1], dtype=np.int64)
                     for w in windows])
    all_ = torch.from_numpy(rows)
    return all_[:, :seq_len].contiguous(), all_[:, 1:].contiguous()


def batch(tokens_path, dtype, seq_len, t, r, i, d, m, b, shuffle_seed=None):
    """Microbatch i of iteration t for data-parallel rank r, as ZeroPipe reads it: (inputs,
    targets), int64 tensors [b, seq_len]. A global batch is the concatenation over r < d, i < m."""
    tokens = read_tokens(tokens_path, dtype)
    n = _windows(tokens_path, tokens, seq_len)
    windows = [window_index(t, r, i, j, d, m, b, n, shuffle_seed) for j in range(b)]
    return _gather(tokens, seq_len, windows)


def eval_batch(tokens_path, dtype, seq_len, k, b):
    """Eval batch k (fixed, never shuffled): row j is window (k*b + j) % N_eval. Returns
    (inputs, targets), int64 tensors [b, seq_len]."""
    if k < 0 or b < 1:
        raise ValueError(f"eval_batch: need k >= 0 and b >= 1 (k {k}, b {b})")
    tokens = read_tokens(tokens_path, dtype)
    n = _windows(tokens_path, tokens, seq_len)
    return _gather(tokens, seq_len, [(k * b + j) % n for j in range(b)])


def write_tokens(ids, path, dtype="uint16"):
    """Writes token ids (a 1-D sequence, numpy array or tensor of integers) to `path` as a flat
    little-endian file of `dtype` ("uint16" or "uint32"). ValueError, naming the first offender,
    if an id is out of the dtype's range. Returns path."""
    if dtype not in DTYPES:
        raise ValueError(f"write_tokens: unknown dtype '{dtype}'; use uint16 or uint32")
    array = ids.detach().cpu().numpy() if torch.is_tensor(ids) else np.asarray(ids)
    if array.ndim != 1:
        raise ValueError(f"write_tokens: ids must be 1-D, got shape {tuple(array.shape)}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"write_tokens: ids must be integers, got {array.dtype}")
    high = np.iinfo(DTYPES[dtype]).max
    if array.size:
        bad = (array < 0) | (array > high)
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"write_tokens '{path}': id {int(array[k])} at index {k} is out of "
                             f"range for {dtype} (0..{high})"
                             + ("; use dtype='uint32'" if dtype == "uint16" else ""))
    array.astype(DTYPES[dtype]).tofile(path)
    return path


def bytes_to_tokens(path):
    """A byte-level tokenizer: the bytes of the file at `path` as token ids 0..255 (vocab 256),
    a 1-D int64 tensor. For example write_tokens(bytes_to_tokens("input.txt"), "train.bin")."""
    return torch.from_numpy(np.fromfile(path, dtype=np.uint8).astype(np.int64))
