"""Tests of the zeropipe package. Run: python3 -m unittest discover -s python/tests (ctest runs
them as python_zeropipe with the interpreter scripts/find-python finds)."""
import math
import os
import sys
import tempfile
import unittest
import warnings
from typing import Tuple

import numpy as np

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import zeropipe  # noqa: E402
from zeropipe import ContractError  # noqa: E402

# --- a small transformer as nn.Sequential: embedding, two blocks, head ---


class Embed(nn.Module):
    def __init__(self, vocab, seq_len, hidden):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq_len, hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tok(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0,
                                                batch_first=True, norm_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        L = x.size(1)
        causal = torch.triu(torch.full((L, L), float("-inf"), device=x.device), diagonal=1)
        return self.layer(x, src_mask=causal)


class Head(nn.Module):
    def __init__(self, hidden, vocab):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def tiny_gpt(vocab=32, seq_len=8, hidden=16, heads=2):
    torch.manual_seed(0)
    return nn.Sequential(Embed(vocab, seq_len, hidden), Block(hidden, heads),
                         Block(hidden, heads), Head(hidden, vocab))


# --- blocks that pass tuples: (hidden, mask), and a head returning (logits, aux) ---


class MaskedEmbed(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.tok(x), x % 3 != 0


class MaskedMix(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.lin = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return h + torch.tanh(self.lin(h)) * mask.unsqueeze(-1).to(h.dtype), mask


class AuxHead(nn.Module):
    def __init__(self, hidden, vocab):
        super().__init__()
        self.out = nn.Linear(hidden, vocab)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.out(h), 0.1 * h.pow(2).mean()


# --- blocks that break the contract ---


class Pair(nn.Module):
    def forward(self, x: torch.Tensor):
        return x, x


class TwoInputs(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class PoolBatch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(0)


class LastToken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1]


class NotScriptable(nn.Module):
    def forward(self, x):
        return torch.from_numpy(np.asarray(x)) * 2


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory(prefix="zeropipe-test-")
        self.dir = self._dir.name

    def tearDown(self):
        self._dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)


class ExportModelTest(TempDirTest):
    def setUp(self):
        super().setUp()
        # TorchScript warns about nn.TransformerEncoderLayer's constants; not ours to fix.
        warnings.filterwarnings("ignore", message=".*was found in ScriptModule constants")

    def test_exports_a_transformer_that_loads_back(self):
        model = tiny_gpt()
        path = zeropipe.export_model(model, self.path("model.pt"), vocab=32)
        self.assertEqual(path, self.path("model.pt"))
        loaded = torch.jit.load(path)
        self.assertEqual([name for name, _ in loaded.named_children()], ["0", "1", "2", "3"])
        ids = torch.randint(0, 32, (3, 8))
        with torch.no_grad():
            expected = model(ids)
            self.assertEqual(tuple(expected.shape), (3, 8, 32))
            torch.testing.assert_close(loaded(ids), expected)
            # Blocks one by one, as pipeline stages run them.
            x = ids
            for name, block in loaded.named_children():
                x = block(x)
            torch.testing.assert_close(x, expected)

    def test_an_explicit_sample_works_without_vocab(self):
        sample = torch.randint(0, 32, (1, 5))
        zeropipe.export_model(tiny_gpt(), self.path("m.pt"), sample=sample)
        self.assertTrue(os.path.exists(self.path("m.pt")))

    def assertViolation(self, model, block, *fragments, vocab=32):
        with self.assertRaises(ContractError) as caught:
            zeropipe.export_model(model, self.path("bad.pt"), vocab=vocab)
        message = str(caught.exception)
        self.assertIn(block, message)
        for fragment in fragments:
            self.assertIn(fragment, message)
        self.assertFalse(os.path.exists(self.path("bad.pt")))

    def test_contract_violations_name_the_block(self):
        g = tiny_gpt()
        self.assertViolation(nn.Sequential(g[0], Pair(), g[3]), "block 1 (Pair)", "one tensor")
        self.assertViolation(nn.Sequential(g[0], g[1], TwoInputs(), g[3]), "block 2 (TwoInputs)",
                             "x: Tensor, y: Tensor")
        self.assertViolation(nn.Sequential(g[0], PoolBatch(), g[3]), "block 1 (PoolBatch)",
                             "batch (2)")
        self.assertViolation(nn.Sequential(g[0], g[1], LastToken(), g[3]), "block 3 (Head)",
                             "logits [b, L, V]")
        self.assertViolation(nn.Sequential(g[0], g[1], g[2]), "block 2 (Block)", "logits")
        self.assertViolation(nn.Sequential(g[0], NotScriptable(), g[3]),
                             "block 1 (NotScriptable)", "torch.jit.script")
        # Block 0 gets int64 token ids; a Linear cannot take them.
        self.assertViolation(nn.Sequential(nn.Linear(8, 8), g[3]), "block 0 (Linear)",
                             "torch.int64")
        # Logits over the wrong vocabulary.
        self.assertViolation(tiny_gpt(vocab=32), "block 3 (Head)", "vocab is 16", vocab=16)

    def test_tuples_between_blocks_export_and_run_as_zeropipe_runs_them(self):
        torch.manual_seed(1)
        net = nn.Sequential(MaskedEmbed(32, 16), MaskedMix(16), MaskedMix(16), AuxHead(16, 32))
        path = zeropipe.export_model(net, self.path("tuple.pt"), vocab=32)
        loaded = torch.jit.load(path)
        self.assertEqual([n for n, _ in loaded.named_children()], ["0", "1", "2", "3"])
        self.assertEqual(sorted(dict(loaded.named_parameters())),
                         sorted(dict(net.named_parameters())))
        x = torch.randint(0, 32, (2, 8))
        y = torch.randint(0, 32, (2, 8))
        h, mask = net[0](x)
        h, mask = net[2](*net[1](h, mask))
        logits, aux = net[3](h, mask)
        want = nn.functional.cross_entropy(logits.reshape(-1, 32), y.reshape(-1)) + aux
        for model in (net, loaded):
            got = zeropipe.loss_of(zeropipe.run_blocks(model, x), y)
            torch.testing.assert_close(got, want)
        # A head whose (logits, aux) has a non-scalar aux breaks the contract.
        self.assertViolation(nn.Sequential(MaskedEmbed(32, 16), MaskedMix(16)), "block 1",
                             "(logits, aux)")

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            zeropipe.export_model(Head(4, 4), self.path("m.pt"), vocab=4)
        with self.assertRaises(ValueError):
            zeropipe.export_model(tiny_gpt(), self.path("m.pt"))  # neither sample nor vocab
        with self.assertRaises(ValueError):
            zeropipe.export_model(tiny_gpt(), self.path("m.pt"), sample=torch.zeros(2, 8))


def reference_permutation(seed, pass_, n):
    """The algorithm exactly as worker/model/token_file.h states it, one number at a time."""
    mask = (1 << 64) - 1

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    state = mix((mix(seed) + pass_) & mask)
    perm = list(range(n))
    for k in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & mask
        j = mix(state) % (k + 1)
        perm[k], perm[j] = perm[j], perm[k]
    return perm


class TokensTest(TempDirTest):
    def write_iota(self, name, n, dtype="uint16"):
        return zeropipe.write_tokens(np.arange(n), self.path(name), dtype)

    def test_write_tokens_round_trip_little_endian(self):
        path = zeropipe.write_tokens([513, 0, 65535], self.path("a.bin"))
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"\x01\x02\x00\x00\xff\xff")
        np.testing.assert_array_equal(zeropipe.read_tokens(path, "uint16"), [513, 0, 65535])
        ids = torch.tensor([0, 70000, 2**32 - 1])
        path = zeropipe.write_tokens(ids, self.path("b.bin"), "uint32")
        self.assertEqual(os.path.getsize(path), 12)
        np.testing.assert_array_equal(zeropipe.read_tokens(path, "uint32"), ids.numpy())

    def test_write_tokens_rejects_ids_out_of_range(self):
        with self.assertRaises(ValueError) as caught:
            zeropipe.write_tokens([1, 2, 65536, 70000], self.path("a.bin"))
        self.assertIn("id 65536 at index 2", str(caught.exception))
        self.assertIn("uint32", str(caught.exception))
        with self.assertRaises(ValueError):
            zeropipe.write_tokens([-1], self.path("a.bin"), "uint32")
        with self.assertRaises(ValueError):
            zeropipe.write_tokens([2**32], self.path("a.bin"), "uint32")
        with self.assertRaises(ValueError):
            zeropipe.write_tokens([1], self.path("a.bin"), "int8")
        with self.assertRaises(ValueError):
            zeropipe.write_tokens([[1, 2]], self.path("a.bin"))
        with self.assertRaises(ValueError):
            zeropipe.write_tokens([1.5], self.path("a.bin"))

    def test_shuffle_golden_values_shared_with_cpp(self):
        # worker/model/token_file_test.cc asserts the same values.
        self.assertEqual(list(zeropipe.shuffle_permutation(42, 0, 10)),
                         [2, 8, 9, 7, 1, 4, 6, 0, 5, 3])
        self.assertEqual(list(zeropipe.shuffle_permutation(42, 1, 10)),
                         [3, 1, 6, 8, 4, 5, 9, 7, 2, 0])
        self.assertEqual(list(zeropipe.shuffle_permutation(0, 0, 10)),
                         [6, 3, 2, 9, 8, 1, 4, 7, 0, 5])
        # 41 tokens, L = 4 (N = 10), d = 2, m = 2, b = 3, seed 42: t = 1, r = 1, i = 1 reads
        # windows 1, 4, 6.
        path = self.write_iota("train.bin", 41)
        inputs, targets = zeropipe.batch(path, "uint16", 4, t=1, r=1, i=1, d=2, m=2, b=3,
                                         shuffle_seed=42)
        self.assertTrue(torch.equal(inputs, torch.tensor([[4, 5, 6, 7], [16, 17, 18, 19],
                                                          [24, 25, 26, 27]])))
        self.assertTrue(torch.equal(targets, inputs + 1))

    def test_forward_seed_golden_values_shared_with_cpp(self):
        # worker/executor/executor_test.cc asserts the same values (model::ForwardSeed).
        self.assertEqual(zeropipe.forward_seed(1, 2, 3, 4, 5), 0x5411837E6A4E571D)
        self.assertNotEqual(zeropipe.forward_seed(1, 2, 3, 4, 6), 0x5411837E6A4E571D)

    def test_run_blocks_needs_a_seed_per_stage(self):
        net = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Dropout(0.5))
        with self.assertRaisesRegex(ValueError, "1 seeds for 2 stages"):
            zeropipe.run_blocks(net, torch.zeros(1, 3, dtype=torch.long), [1], [7])
        a = zeropipe.run_blocks(net, torch.zeros(1, 3, dtype=torch.long), [1], [7, 9])
        b = zeropipe.run_blocks(net, torch.zeros(1, 3, dtype=torch.long), [1], [7, 9])
        self.assertTrue(torch.equal(a, b))  # the same seeds, the same masks

    def test_shuffle_matches_the_stated_algorithm(self):
        for seed, pass_, n in [(42, 0, 10), (1, 5, 1), (2, 0, 2), (2**64 - 1, 3, 257),
                               (123456789, 7, 1000)]:
            perm = list(zeropipe.shuffle_permutation(seed, pass_, n))
            self.assertEqual(perm, reference_permutation(seed, pass_, n), (seed, pass_, n))
            self.assertEqual(sorted(perm), list(range(n)))
        self.assertNotEqual(zeropipe.shuffle_permutation(3, 0, 100),
                            zeropipe.shuffle_permutation(3, 1, 100))
        self.assertNotEqual(zeropipe.shuffle_permutation(3, 0, 100),
                            zeropipe.shuffle_permutation(4, 0, 100))

    def test_window_index_matches_brute_force_enumeration(self):
        d, m, b, n = 2, 3, 2, 5
        # Every sample in the order the contract numbers them: t, then r, then i, then j.
        samples = [(t, r, i, j) for t in range(6) for r in range(d) for i in range(m)
                   for j in range(b)]
        plain = [zeropipe.window_index(*s, d, m, b, n) for s in samples]
        self.assertEqual(plain, [g % n for g in range(len(samples))])
        shuffled = [zeropipe.window_index(*s, d, m, b, n, shuffle_seed=9) for s in samples]
        passes = [shuffled[p * n:(p + 1) * n] for p in range(len(samples) // n)]
        for p, windows in enumerate(passes):
            self.assertEqual(sorted(windows), list(range(n)), f"pass {p}")
            self.assertEqual(windows, reference_permutation(9, p, n))
        self.assertGreater(len({tuple(w) for w in passes}), 1)
        with self.assertRaises(ValueError):
            zeropipe.window_index(0, 2, 0, 0, d, m, b, n)  # r >= d

    def test_batch_reads_windows_and_wraps(self):
        # 23 tokens, L = 4: N = 5. t = 1, r = 1, i = 2, j = 1 with d = 2, m = 3, b = 2: g = 23,
        # window 3 (tokens 12..16), as in the C++ test.
        path = self.write_iota("train.bin", 23)
        self.assertEqual(zeropipe.n_windows(path, "uint16", 4), 5)
        inputs, targets = zeropipe.batch(path, "uint16", 4, t=1, r=1, i=2, d=2, m=3, b=2)
        self.assertEqual(inputs.dtype, torch.int64)
        self.assertEqual(tuple(inputs.shape), (2, 4))
        self.assertEqual(inputs[1].tolist(), [12, 13, 14, 15])
        self.assertEqual(targets[1].tolist(), [13, 14, 15, 16])
        self.assertEqual(inputs[0].tolist(), [8, 9, 10, 11])  # g = 22, window 2

    def test_uint32_batch(self):
        path = zeropipe.write_tokens(np.arange(70000, 70041), self.path("train.bin"), "uint32")
        inputs, targets = zeropipe.batch(path, "uint32", 4, t=2, r=0, i=1, d=1, m=2, b=3)
        self.assertEqual(inputs[:, 0].tolist(), [70020, 70024, 70028])  # windows 5, 6, 7
        self.assertEqual(targets[2].tolist(), [70029, 70030, 70031, 70032])

    def test_eval_batches_are_fixed_and_wrap(self):
        path = self.write_iota("val.bin", 23)  # N = 5
        for k in range(4):
            inputs, targets = zeropipe.eval_batch(path, "uint16", 4, k, b=2)
            self.assertEqual(inputs[:, 0].tolist(), [4 * ((2 * k + j) % 5) for j in range(2)])
            self.assertTrue(torch.equal(targets, inputs + 1))
        self.assertEqual(zeropipe.eval_batch(path, "uint16", 4, 2, b=2)[0][1, 0].item(), 0)

    def test_errors_name_the_file(self):
        missing = self.path("missing.bin")
        with self.assertRaises(FileNotFoundError) as caught:
            zeropipe.batch(missing, "uint16", 4, 0, 0, 0, 1, 1, 1)
        self.assertIn(missing, str(caught.exception))
        odd = self.path("odd.bin")
        with open(odd, "wb") as f:
            f.write(b"abc")
        for call, fragment in [
                (lambda: zeropipe.read_tokens(odd, "uint16"), "multiple of 2"),
                (lambda: zeropipe.read_tokens(self.write_iota("ok.bin", 9), "int8"), "int8"),
                (lambda: zeropipe.n_windows(self.write_iota("short.bin", 4), "uint16", 4),
                 "one window"),
                (lambda: zeropipe.n_windows(self.write_iota("empty.bin", 0), "uint16", 4),
                 "one window")]:
            with self.assertRaises(ValueError) as caught:
                call()
            self.assertIn(fragment, str(caught.exception))
            self.assertIn("token file '" + self.dir, str(caught.exception))
        self.assertEqual(zeropipe.n_windows(self.write_iota("five.bin", 5), "uint16", 4), 1)

    def test_bytes_to_tokens(self):
        path = self.path("input.txt")
        with open(path, "wb") as f:
            f.write(b"hi\n\xff")
        ids = zeropipe.bytes_to_tokens(path)
        self.assertEqual(ids.dtype, torch.int64)
        self.assertEqual(ids.tolist(), [104, 105, 10, 255])
        out = zeropipe.write_tokens(ids, self.path("train.bin"))
        self.assertEqual(zeropipe.read_tokens(out, "uint16").tolist(), [104, 105, 10, 255])


if __name__ == "__main__":
    unittest.main()
