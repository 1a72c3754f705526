"""How far cached generation is from what the CPU allows, at the shakespeare_char size.

    python benchmarks/decode_limits.py --config configs/shakespeare_char.yaml --tokens 2000

Each new character (batch 1, KV cache) multiplies every weight matrix by one vector: about
2·N FLOPs for N parameters (plus attention over the cache), and every weight byte read once.
This measures, in one process: the float32 matmul peak (the best of square matmuls), the
memory bandwidth (the best of summing a float32 buffer far larger than the caches), the
model's matrices each multiplied by one vector and nothing else (torch's matrix-vector
product, the floor of a step that calls it: as nn.Linear stores them, (out, in), and stored
transposed, (in, out), the layout tinygpt.generation.fused_step's Decoder keeps), one cached step alone (the
mean of the steps from a half-full cache to a full one: no refills), and the model's cached
generation (refills of the cache at block_size included); and prints the time per token each
allows beside the time generation takes.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

import torch
import torch.nn.functional as F

from tinygpt.config.run_config import load_config
from tinygpt.generation.fused_step import Decoder
from tinygpt.generation.kv_cache import KVCache
from tinygpt.generation.sampling import generate
from tinygpt.model import GPT, GPTConfig


def best_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_peak() -> float:
    """FLOP/s of the fastest of 512², 1024² and 2048² float32 matmuls."""
    rates = []
    for n in (512, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        rates.append(2 * n**3 / best_seconds(lambda a=a, b=b: a @ b, 5))
    return max(rates)


def bandwidth() -> float:
    """Bytes/s of reading a 512 MiB float32 buffer (summing it)."""
    buffer = torch.ones(128 * 2**20)
    return buffer.numel() * 4 / best_seconds(buffer.sum, 5)


def matmuls_alone(model: GPT, repeats: int) -> tuple[float, float]:
    """Seconds to multiply every linear layer's weight (out, in) by one vector (1, 1, in) as a step
    does, and the same with each weight stored transposed and contiguous, (in, out)."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    vectors = [torch.randn(1, 1, w.size(1)) for w in weights]
    stored_transposed = [w.t().contiguous() for w in weights]
    pairs, pairs_transposed = (
        list(zip(vectors, weights, strict=True)),
        list(zip(vectors, stored_transposed, strict=True)),
    )
    as_stored = best_seconds(lambda: [F.linear(x, w) for x, w in pairs], repeats * 10)
    transposed = best_seconds(lambda: [x @ w for x, w in pairs_transposed], repeats * 10)
    return as_stored, transposed


def step_alone(model: GPT) -> float:
    """Mean seconds of one Decoder.step, from block_size // 2 cached positions to block_size."""
    half = model.config.block_size // 2
    cache, ids = KVCache(model.config, 1), torch.zeros(1, dtype=torch.long)
    model(torch.zeros((1, half), dtype=torch.long), cache=cache)
    decoder, steps = Decoder(model), model.config.block_size - half
    start = time.perf_counter()
    for _ in range(steps):
        decoder.step(ids, cache)
    return (time.perf_counter() - start) / steps


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--config", default="configs/shakespeare_char.yaml")
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the result to this JSON file")
    args = parser.parse_args()
    m = load_config(args.config).model
    model = GPT(GPTConfig(vocab_size=65, **vars(m))).eval()
    weights = sum(p.numel() for p in model.parameters())
    flops_per_token = 2 * weights + 4 * m.n_layer * m.n_embd * m.block_size // 2  # matmuls + mean cache
    prompt = torch.zeros((1, 1), dtype=torch.long)
    generate(model, prompt, 20)
    runs = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        generate(model, prompt, args.tokens)
        runs.append(args.tokens / (time.perf_counter() - start))
    peak, stream = matmul_peak(), bandwidth()
    with torch.inference_mode():
        as_stored, transposed = matmuls_alone(model, args.repeats)
        one_step = statistics.median(step_alone(model) for _ in range(args.repeats))
    measured = 1 / statistics.median(runs)
    result = {
        "parameters": weights,
        "weight_bytes": weights * 4,
        "flops_per_token": flops_per_token,
        "matmul_peak_flops": peak,
        "bandwidth_bytes_per_s": stream,
        "tokens_per_s": statistics.median(runs),
        "seconds_per_token": {
            "measured": measured,
            "one_step_without_refills": one_step,
            "arithmetic_at_peak": flops_per_token / peak,
            "weights_at_bandwidth": weights * 4 / stream,
            "matmuls_alone": as_stored,
            "matmuls_alone_transposed_weights": transposed,
        },
    }
    s = result["seconds_per_token"]
    print(
        f"{weights:,} parameters ({weights * 4 / 1e6:.1f} MB in float32), "
        f"{flops_per_token / 1e6:.1f} MFLOP a token\n"
        f"matmul peak {peak / 1e9:.1f} GFLOP/s, memory bandwidth {stream / 1e9:.1f} GB/s\n"
        f"cached generation: {result['tokens_per_s']:.0f} tokens/s = {measured * 1e3:.2f} ms a token; "
        f"the arithmetic at peak takes {s['arithmetic_at_peak'] * 1e3:.2f} ms, "
        f"reading the weights once {s['weights_at_bandwidth'] * 1e3:.2f} ms\n"
        f"one cached step alone (no refills): {one_step * 1e3:.2f} ms\n"
        f"the matrices times one vector, nothing else: {as_stored * 1e3:.2f} ms "
        f"({transposed * 1e3:.2f} ms with each stored transposed)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
