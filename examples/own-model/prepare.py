"""Step 1 of "Train your own model" (docs/guide.md): export the transformer of model.py as TorchScript
and turn a text file into byte-level token files.

usage: prepare.py [--text FILE] [--out DIR]
Writes DIR/model.pt, DIR/train.bin (the first 90% of the text) and DIR/eval.bin (the rest).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import model  # noqa: E402
import zeropipe  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    parser.add_argument("--out", default=HERE)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    net = model.build(vocab=256, seq_len=64, hidden=64, heads=4, layers=4, seed=0)
    path = zeropipe.export_model(net, os.path.join(args.out, "model.pt"), vocab=256)
    n = sum(p.numel() for p in net.parameters())
    print(f"model: {len(net)} blocks, {n} parameters -> {path}")
    ids = zeropipe.bytes_to_tokens(args.text)
    cut = len(ids) * 9 // 10
    zeropipe.write_tokens(ids[:cut], os.path.join(args.out, "train.bin"), dtype="uint16")
    zeropipe.write_tokens(ids[cut:], os.path.join(args.out, "eval.bin"), dtype="uint16")
    print(f"tokens: {cut} train, {len(ids) - cut} eval (bytes of {args.text})")


if __name__ == "__main__":
    main()
