"""Smoke test of `scripts/bench peer`: bench/peer/peer_bench.py --quick (one row: the GPT of
examples/own-model on ZeroPipe's zb-v and PyTorch's ScheduleZBVZeroBubble, p = 2, a few
iterations) must print a table with both frameworks' columns, and the first iterations' losses of
the two must agree within 1e-5 relative.

usage: peer_smoke_test.py --zpipe BUILD/client/zpipe
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZPIPE = None


class PeerBenchSmokeTest(unittest.TestCase):
    def test_quick_row(self):
        with tempfile.TemporaryDirectory(prefix="zpipe-peer-smoke-") as tmp:
            results = os.path.join(tmp, "peer.json")
            run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "peer",
                                                               "peer_bench.py"),
                                  "--zpipe", ZPIPE, "--quick", "--json", results],
                                 capture_output=True, text=True, timeout=600)
            self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr[-3000:])
            header = next((line for line in run.stdout.splitlines()
                           if line.startswith("| row |")), None)
            self.assertIsNotNone(header, run.stdout)
            for column in ("tok/s ZP", "tok/s PT", "ZP/PT", "bubble ZP", "bubble PT",
                           "RSS MiB ZP", "RSS MiB PT", "loss it1 ZP", "loss it1 PT"):
                self.assertIn(f"| {column} |", header)
            with open(results) as f:
                rows = json.load(f)
            self.assertEqual(len(rows), 1)
            row = rows[0]
            for side in ("zeropipe", "torch"):
                self.assertNotIn("error", row[side], row[side].get("error"))
                self.assertGreater(row[side]["tokens_per_s"], 0)
                self.assertTrue(0 <= row[side]["bubble"] < 1, row[side]["bubble"])
                self.assertEqual(len(row[side]["rss_mib"]), row["p"] * row["d"])
            self.assertIsNotNone(row["loss_max_rel_diff"])
            self.assertLess(row["loss_max_rel_diff"], 1e-5,
                            f"losses: ZeroPipe {row['zeropipe']['losses']}, PyTorch "
                            f"{row['torch']['losses']}")
            print(run.stdout, file=sys.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--zpipe", required=True)
    args, rest = parser.parse_known_args()
    ZPIPE = os.path.abspath(args.zpipe)
    unittest.main(argv=[sys.argv[0]] + rest)
