"""Issue 39 item 3: one row times each of a 6 × 384 step's 24 matrices, through every torch kernel that can.

    python benchmarks/row_kernels.py --rounds 20

A generation step at batch 1 multiplies one row by each block matrix; on a CPU whose caches do not hold
the 43 MB of weights, reading them bounds it. This times the 24 products of one step (qkv, proj, fc,
fc_proj × 6 layers, random float32 weights) through each kernel torch 2.13's CPU build offers for it, on
1 thread and on 2, in interleaved bursts, beside reading the same matrices (`weight.sum()`, one call
each): MKL (`torch.mm` from (in, out), the Decoder's layout, whole and cut into one run of rows a
thread as the Decoder cuts it; `torch.mv` from (out, in), nn.Linear's), oneDNN (a 1 × 1 convolution,
which torch sends to it), fbgemm (`F.embedding_bag` with the row as per-sample weights) and, for
reference only, torch's own half-precision product (`torch.mv` of float16 weights: half the bytes, but
not the float32 model's numbers). BENCHMARKS.md, "What a second core can give this step", says what it
found.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

import torch
import torch.nn.functional as F

from tinygpt.generation.fused_step import _cut_product

C = 384
SHAPES = [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C)] * 6  # (in, out) of each block matrix, 6 layers


def kernels() -> dict:
    """Each way to compute the 24 products (or read their matrices): a function of no arguments."""
    torch.manual_seed(0)
    w_in_out = [torch.randn(n_in, n_out) for n_in, n_out in SHAPES]  # (in, out)
    w_out_in = [w.t().contiguous() for w in w_in_out]  # (out, in)
    rows = {n: torch.randn(1, n) for n in (C, 4 * C)}  # (1, in)
    vectors = {n: r[0] for n, r in rows.items()}  # (in,)
    conv = [w.unsqueeze(-1) for w in w_out_in]  # (out, in, 1)
    columns = {n: r.unsqueeze(-1) for n, r in rows.items()}  # (1, in, 1)
    ids, offsets = {n: torch.arange(n) for n in (C, 4 * C)}, torch.tensor([0])
    half = [w.half() for w in w_out_in]
    half_vectors = {n: v.half() for n, v in vectors.items()}
    return {
        "matrices read (sum)": lambda: [w.sum() for w in w_in_out],
        "MKL mm, (in, out)": lambda: [torch.mm(rows[w.size(0)], w) for w in w_in_out],
        "the Decoder's cut (MKL)": lambda: [
            _cut_product(rows[w.size(0)], w, torch.get_num_threads()) for w in w_in_out
        ],  # on 2 threads one run of rows a thread (on 1, a bmm of one piece, where the Decoder calls addmm)
        "MKL mv, (out, in)": lambda: [torch.mv(w, vectors[w.size(1)]) for w in w_out_in],
        "oneDNN 1x1 conv1d": lambda: [F.conv1d(columns[w.size(1)], w) for w in conv],
        "fbgemm embedding_bag": lambda: [
            F.embedding_bag(ids[w.size(0)], w, offsets, mode="sum", per_sample_weights=vectors[w.size(0)])
            for w in w_in_out
        ],
        "float16 mv (reference)": lambda: [torch.mv(w, half_vectors[w.size(1)]) for w in half],
    }


def burst(run, steps: int = 5) -> float:
    """Milliseconds a step of the 24 products takes, the mean of `steps` in a row."""
    start = time.perf_counter()
    for _ in range(steps):
        run()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="interleaved bursts of each (default 20)")
    args = parser.parse_args()
    runs, times = kernels(), {}
    for _ in range(args.rounds):
        for name, run in runs.items():
            for threads in (1, 2):
                torch.set_num_threads(threads)
                burst(run, steps=1)  # warm: the threads, the caches
                times.setdefault((name, threads), []).append(burst(run))
    print(f"{'24 products, 6 x 384':26s} {'1 thread':>10s} {'2 threads':>10s} {'2 / 1':>7s}  (medians)")
    for name in runs:
        one, two = (statistics.median(times[(name, threads)]) for threads in (1, 2))
        print(f"{name:26s} {one:7.2f} ms {two:7.2f} ms {one / two:6.2f}x")


if __name__ == "__main__":
    main()
