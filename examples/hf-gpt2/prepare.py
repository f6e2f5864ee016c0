"""Step 1 of the Hugging Face GPT-2 example (docs/guide.md "Python models"): turn a text file into
byte-level token files. Nothing to export: the workers build the model from model.py.

usage: prepare.py [--text FILE] [--out DIR]
Writes DIR/train.bin (the first 90% of the text) and DIR/eval.bin (the rest), one byte = one
token (vocab_size 256, model.py's default).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import zeropipe  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    parser.add_argument("--out", default=HERE)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ids = zeropipe.bytes_to_tokens(args.text)
    cut = len(ids) * 9 // 10
    zeropipe.write_tokens(ids[:cut], os.path.join(args.out, "train.bin"), dtype="uint16")
    zeropipe.write_tokens(ids[cut:], os.path.join(args.out, "eval.bin"), dtype="uint16")
    print(f"tokens: {cut} train, {len(ids) - cut} eval (bytes of {args.text})")


if __name__ == "__main__":
    main()
