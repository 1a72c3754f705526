"""Cached generation through each of this tree's paths, in short bursts taken in turn in one process.

    OMP_NUM_THREADS=1 python benchmarks/step_paths.py --layers 4 --width 128 --heads 4 --block 64

On a busy machine separate processes see different loads; bursts of --burst characters
taken in turn, many times, see the same. The paths, on the same seeded untrained model
(vocabulary 65, no biases), batch 1, temperature 1:

  modules+multinomial  each step through the model's modules, torch.multinomial (before round 3)
  modules+clocks       each step through the modules, the exponential-clock sampler (generate.draw)
  decoder+clocks       tinygpt.generation.fused_step's Decoder and the clock sampler: what `stream` does now

Prints each path's characters per second over all its bursts and the ratio to the first.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

import torch

from tinygpt.generation import fused_step as decode
from tinygpt.generation import sampling as generate
from tinygpt.model import GPT, GPTConfig


def multinomial(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)


PATHS = {  # name: (the Decoder usable, the sampler's draw)
    "modules+multinomial": (False, multinomial),
    "modules+clocks": (False, generate.draw),
    "decoder+clocks": (True, generate.draw),
}


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    for name, default in (
        ("layers", 4),
        ("width", 128),
        ("heads", 4),
        ("block", 64),
        ("burst", 100),
        ("turns", 30),
    ):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--json", help="also write the result to this JSON file")
    args = parser.parse_args()
    torch.manual_seed(0)
    sizes = dict(n_layer=args.layers, n_embd=args.width, n_head=args.heads, block_size=args.block)
    model, prompt = (
        GPT(GPTConfig(vocab_size=65, bias=False, **sizes)).eval(),
        torch.zeros((1, 1), dtype=torch.long),
    )
    usable, seconds = decode.usable, dict.fromkeys(PATHS, 0.0)
    load_before = os.getloadavg()[0]
    for turn in range(args.turns + 1):  # turn 0 warms up and is not counted
        for name, (one_step, draw) in PATHS.items():
            decode.usable, generate.draw = (usable if one_step else lambda *_: False), draw
            start = time.perf_counter()
            generate.generate(model, prompt, args.burst, generator=torch.Generator().manual_seed(turn))
            seconds[name] += (time.perf_counter() - start) if turn else 0.0
    decode.usable, generate.draw = usable, PATHS["modules+clocks"][1]
    rates = {name: args.turns * args.burst / s for name, s in seconds.items()}
    first = next(iter(rates.values()))
    result = {
        "sizes": sizes,
        "burst": args.burst,
        "turns": args.turns,
        "tokens_per_s": rates,
        "ratio_to_first": {name: r / first for name, r in rates.items()},
        "threads": torch.get_num_threads(),
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
