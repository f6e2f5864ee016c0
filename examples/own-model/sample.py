"""Step 3 of "Train your own model" (docs/guide.md): load the trained model ZeroPipe wrote and sample
text from it.

usage: sample.py MODEL.pt [--prompt TEXT] [--tokens N] [--temperature T]
"""
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--prompt", default="The GNU General Public License ")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    net = torch.jit.load(args.model)
    net.eval()
    ids = list(args.prompt.encode())
    with torch.no_grad():
        for _ in range(args.tokens):
            x = torch.tensor([ids[-args.seq_len:]], dtype=torch.long)
            logits = net(x)[0, -1] / args.temperature
            ids.append(int(torch.multinomial(torch.softmax(logits, -1), 1)))
    print(bytes(ids).decode("utf-8", errors="replace"))


if __name__ == "__main__":
    main()
