"""What the named hook points cost with nothing attached: training steps and generation, side by side.

Two source trees (e.g. a checkout before the hook points and one after) are timed in turn, A B A B,
each in a fresh process importing tinygpt from that tree, on one shape: the training step (forward,
backward, AdamW) at a given batch, and cached generation (the fused one-position step) and uncached
generation (the model's forward, where the hook points are) of `chars` characters. Prints the medians
and the ratio B/A per round, as JSON; `--out` also writes it.

    python benchmarks/hook_cost.py --before /path/to/old/src --after src --rounds 5
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
import torch
from tinygpt import GPT, GPTConfig
from tinygpt.generation.sampling import generate

n_layer, n_head, n_embd, block, batch, steps, chars = (int(a) for a in sys.argv[1:8])
torch.manual_seed(0)
shape = GPTConfig(vocab_size=65, block_size=block, n_layer=n_layer, n_head=n_head, n_embd=n_embd, bias=False)
model = GPT(shape)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(65, (batch, block))
y = torch.randint(65, (batch, block))

def step():
    _, loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

def timed(fn, n):
    fn()  # warm-up
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]

train_ms = timed(step, steps) * 1e3
model.eval()
prompt = torch.zeros(1, 1, dtype=torch.long)
cached = timed(lambda: generate(model, prompt, chars, temperature=0), 3)
uncached = timed(lambda: generate(model, prompt, chars, temperature=0, use_cache=False), 3)
print(json.dumps({"train_step_ms": train_ms, "cached_chars_per_s": chars / cached,
                  "uncached_chars_per_s": chars / uncached}))
"""


def measure(src: Path, shape: list[int]) -> dict:
    env = {"PYTHONPATH": str(src.resolve()), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, shape)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the src/ directory of the old tree")
    parser.add_argument("--after", type=Path, required=True, help="the src/ directory of the new tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", default="4,2,128,64,24", help="n_layer,n_head,n_embd,block_size,batch")
    parser.add_argument("--steps", type=int, default=30, help="training steps timed per process")
    parser.add_argument("--chars", type=int, default=300, help="characters generated per timing")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shape = [int(v) for v in args.shape.split(",")] + [args.steps, args.chars]
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        runs["before"].append(measure(args.before, shape))
        runs["after"].append(measure(args.after, shape))
    keys = runs["before"][0].keys()
    summary = {
        "shape": args.shape,
        "torch_threads": "default",
        "median": {side: {k: statistics.median(r[k] for r in rs) for k in keys} for side, rs in runs.items()},
        "ratio_after_over_before_per_round": {
            k: [round(a[k] / b[k], 4) for a, b in zip(runs["after"], runs["before"], strict=True)]
            for k in keys
        },
    }
    summary["median_ratio"] = {
        k: statistics.median(v) for k, v in summary["ratio_after_over_before_per_round"].items()
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
