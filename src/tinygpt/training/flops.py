"""How much arithmetic a training step does, how fast this device multiplies, and the ratio: MFU.

Training FLOPs per token (`flops_per_token`) count the matrix multiplies,
forward and backward (backward costs twice the forward):

    6·N               N = parameters minus the position embedding: every weight
                      takes part in one multiply-add per token (the tied token
                      embedding as the LM head), ×2 FLOPs, ×3 for backward
    + 12·L·T·C        attention: q·kᵀ and weights·v, 2·T·C FLOPs each per token
                      and layer forward, ×3 for backward (the whole T×T square,
                      as is usual, though causal kernels can skip half)

This is nanoGPT's and PaLM's convention, so MFU figures compare across the two.
Model FLOP utilisation (MFU) is FLOPs per token × tokens/s ÷ the peak matmul
FLOP/s measured on the same device, in the precision training uses. `tinygpt
bench` and the training progress bar both compute it here.
"""

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from tinygpt.model import GPT

MATMUL_SIZES = {"cpu": (1024, 2048, 4096), "cuda": (4096, 8192, 16384)}


def flops_per_token(model: GPT) -> float:
    """Training FLOPs (forward + backward) per token: 6·N + 12·L·T·C (see the module docstring)."""
    c = model.config
    n = model.num_params() - model.wpe.weight.numel()  # the position embedding is added, not multiplied
    return 6 * n + 12 * c.n_layer * c.block_size * c.n_embd


@dataclass(frozen=True)
class Utilisation:
    """MFU of a model on some devices: `of(tokens_per_s)` is the fraction of their peak it uses."""

    flops_per_token: float
    peak_flops: float  # all the devices together

    def achieved(self, tokens_per_s: float) -> float:
        return self.flops_per_token * tokens_per_s

    def of(self, tokens_per_s: float) -> float:
        return self.achieved(tokens_per_s) / self.peak_flops


class Stopwatch:
    """Marks points in time; on CUDA with events, so timing never makes the host wait mid-run."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def intervals(self) -> list[float]:
        """Seconds between consecutive marks (waits for the device once, here)."""
        pairs = zip(self.marks[:-1], self.marks[1:], strict=True)
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in pairs]
        return [b - a for a, b in pairs]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(
    device: torch.device, dtype: torch.dtype, sizes: tuple[int, ...] | None = None, progress: bool = True
) -> dict[str, Any]:
    """Best median FLOP/s of square matmuls (n×n @ n×n, 2n³ FLOPs) over `sizes` (default: the device's
    MATMUL_SIZES), in `dtype`."""
    results = {}
    sizes = sizes or MATMUL_SIZES.get(device.type, MATMUL_SIZES["cpu"])
    for n in tqdm(sizes, desc=f"matmul peak ({str(dtype).removeprefix('torch.')})", disable=not progress):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        a @ b  # warm-up: first-call set-up, kernel selection
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        calls = max(1, int(0.2 / (time.perf_counter() - start)))  # about 0.2 s per timed sample
        watch = Stopwatch(device)
        for _ in range(5):
            watch.mark()
            for _ in range(calls):
                a @ b
        watch.mark()
        results[n] = 2 * n**3 * calls / statistics.median(watch.intervals())
        del a, b
    return {"flops": max(results.values()), "by_size": results}
