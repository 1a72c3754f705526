"""Cached generation speed of several checkouts of tinygpt, A B A B, the same timing code for each.

    git worktree add /tmp/round1 4719f12
    python benchmarks/generation_trees.py --tree round1=/tmp/round1/src --tree now=src \\
        --layers 6 --width 384 --tokens 500 --rounds 3

Each (round, tree) is a fresh Python process with the tree's `src` first on its path, so it
imports that tree's tinygpt; it builds the same seeded untrained model (vocabulary 65, no
biases as in the shipped configs; --block and --heads default to 6 x 384's 256 and 6),
generates 20 characters to warm up, then times --tokens new characters from a one-character
prompt (batch 1, temperature 1, the same draws). Trees take turns, so each sees
the same machine load; the medians and the ratios to the first tree are printed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

TIMING = """
import sys, time, torch
from tinygpt.model import GPT, GPTConfig
try:
    from tinygpt.generation.sampling import generate
except ImportError:  # round 1's layout: generation is a method of the model
    def generate(model, *args, **kwargs):
        return model.generate(*args, **kwargs)
layers, width, heads, block, tokens = map(int, sys.argv[1:6])
torch.manual_seed(0)
config = GPTConfig(vocab_size=65, block_size=block, n_layer=layers, n_head=heads, n_embd=width, bias=False)
model = GPT(config).eval()
prompt = torch.zeros((1, 1), dtype=torch.long)
generate(model, prompt, 20)
draws = torch.Generator().manual_seed(0)
start = time.perf_counter()
generate(model, prompt, tokens, generator=draws)
print(tokens / (time.perf_counter() - start))
"""


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH to a checkout's src")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the result to this JSON file")
    args = parser.parse_args()
    trees = dict(spec.split("=", 1) for spec in args.tree)
    runs: dict[str, list[float]] = {name: [] for name in trees}
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name, src in trees.items():
            env = os.environ | {"PYTHONPATH": str(Path(src).resolve())}
            sizes = [str(n) for n in (args.layers, args.width, args.heads, args.block, args.tokens)]
            done = subprocess.run(
                [sys.executable, "-c", TIMING, *sizes], env=env, capture_output=True, text=True, check=True
            )
            runs[name].append(float(done.stdout.split()[-1]))
            print(f"{name}: {runs[name][-1]:.1f} tokens/s", flush=True)
    first = statistics.median(next(iter(runs.values())))
    result = {
        "layers": args.layers,
        "width": args.width,
        "heads": args.heads,
        "block": args.block,
        "tokens": args.tokens,
        "trees": trees,
        "tokens_per_s": runs,
        "median": {name: statistics.median(r) for name, r in runs.items()},
        "ratio_to_first": {name: statistics.median(r) / first for name, r in runs.items()},
        "threads": os.environ.get("OMP_NUM_THREADS", "torch's default"),
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
