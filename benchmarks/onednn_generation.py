"""Generation with oneDNN on (torch's default) against off, interleaved in one process.

Round 1 switched oneDNN off process-wide around every one-token step; the house
issue removed that switch (a library must not flip process-wide state under a
caller's threads). This measures what the switch bought: new tokens/s at the
shakespeare_char size, batch 1, float32, the KV cache, the same draws each way.

    python benchmarks/onednn_generation.py --rounds 5 --tokens 1000
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch

from tinygpt.generation.sampling import stream
from tinygpt.model import GPT, GPTConfig


def tokens_per_s(model: GPT, tokens: int, onednn: bool) -> float:
    prompt = torch.zeros((1, 1), dtype=torch.long)
    generator = torch.Generator().manual_seed(0)
    with torch.backends.mkldnn.flags(enabled=onednn):
        start = time.perf_counter()
        for _ in stream(model, prompt, tokens, generator=generator):
            pass
        return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=1000)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.0)
    model = GPT(config).eval()
    tokens_per_s(model, 20, True), tokens_per_s(model, 20, False)  # warm-up
    speeds = {"on": [], "off": []}
    for _ in range(args.rounds):
        for name in speeds:
            speeds[name].append(tokens_per_s(model, args.tokens, name == "on"))
    medians = {name: statistics.median(s) for name, s in speeds.items()}
    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "tokens_per_round": args.tokens,
        "tokens_per_s": speeds,
        "median": medians,
        "off_over_on": medians["off"] / medians["on"],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
