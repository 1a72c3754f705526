"""Benchmark a config on this device, in one process: training and generation speed, memory, MFU.

What is measured (`benchmark`):

- training: tokens/s of one optimizer step (forward, backward, clipping, AdamW),
  exactly the step `tinygpt train` runs, as the median over the timed steps
  after warm-up; the first step's extra time is reported as compile time;
- generation: new tokens/s for each length, with and without the KV cache,
  batch 1, float32 as `tinygpt sample` runs it;
- peak memory while training: the process's resident set (RSS) on CPU, the
  most torch allocated on CUDA;
- model FLOP utilisation (MFU): FLOPs per token × tokens/s ÷ the peak matmul
  FLOP/s measured by this same run on this device, in the precision training
  uses (float32, or the autocast dtype); tinygpt.training.flops says how FLOPs are counted.
"""

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from tinygpt.config.run_config import RunConfig
from tinygpt.device import pick_device
from tinygpt.generation.sampling import generate, stream
from tinygpt.model import GPT
from tinygpt.training.distributed import Ranks
from tinygpt.training.flops import Stopwatch, Utilisation, flops_per_token, matmul_peak, synchronize
from tinygpt.training.set_up import Setup, set_up

GENERATION_LENGTHS = (100, 500, 2000)


class PeakMemory:
    """The high-water mark of memory from `reset` on: RSS on CPU, torch's allocations on CUDA."""

    def __init__(self, device: torch.device):
        self.device = device

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif os.path.exists("/proc/self/clear_refs"):
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # Linux: reset the peak RSS (VmHWM) to the current RSS

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        if os.path.exists("/proc/self/status"):
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        import resource  # elsewhere: the lifetime peak (kilobytes on Linux, bytes on macOS)

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if platform.system() == "Darwin" else peak * 1024


def single_process_trainer(config: RunConfig, device: torch.device | None = None) -> Setup:
    """One training process (on the config's device by default), set up as `tinygpt train` does,
    with no run directory."""
    return set_up(config, Ranks(device=device or pick_device(config.train.device)))


def training_speed(config: RunConfig, steps: int = 30, warmup: int = 5, progress: bool = True) -> dict:
    """Time `steps` training steps after `warmup` untimed ones; tokens/s from the median step."""
    trainer = single_process_trainer(config)
    device = trainer.ranks.device
    memory = PeakMemory(device)
    memory.reset()
    watch = Stopwatch(device)
    for step in tqdm(range(warmup + steps), desc="training steps", disable=not progress):
        watch.mark()
        trainer.step(step)
    watch.mark()
    times = watch.intervals()
    median = statistics.median(times[warmup:])
    return {
        "model": trainer.model,
        "dtype": trainer.precision.dtype,
        "tokens_per_s": trainer.tokens_per_step / median,
        "step_s_median": median,
        "first_step_s": times[0],
        "compile_s": times[0] - median if config.train.compile else None,
        "peak_memory_bytes": memory.peak_bytes(),
    }


def generation_speed(
    model: GPT, lengths=GENERATION_LENGTHS, use_cache: bool = True, progress: bool = True
) -> dict[int, float]:
    """New tokens/s for each length, batch 1, from a one-character prompt, sampling at temperature 1."""
    device = next(model.parameters()).device
    model.eval()
    prompt = torch.zeros((1, 1), dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    generate(model, prompt, 5, generator=generator, use_cache=use_cache)  # warm-up
    speeds = {}
    for n in lengths:
        bar = tqdm(
            total=n, desc=f"generating {n} ({'cache' if use_cache else 'no cache'})", disable=not progress
        )
        synchronize(device)
        start = time.perf_counter()
        for _ in stream(model, prompt, n, generator=generator, use_cache=use_cache):
            bar.update(1)
        synchronize(device)
        speeds[n] = n / (time.perf_counter() - start)
        bar.close()
    return speeds


def benchmark(
    config: RunConfig,
    steps: int = 30,
    warmup: int = 5,
    lengths=GENERATION_LENGTHS,
    progress: bool = True,
) -> dict[str, Any]:
    """Everything the module docstring lists, measured in this process on the config's device."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # other work skews CPU timings
    training = training_speed(config, steps, warmup, progress)
    model = training.pop("model")
    device = next(model.parameters()).device
    flops = flops_per_token(model)
    generation = {
        "cache": generation_speed(model, lengths, True, progress),
        "no_cache": generation_speed(model, lengths, False, progress),
    }
    del model
    peak = matmul_peak(device, getattr(torch, training["dtype"]), progress=progress)
    utilisation = Utilisation(flops, peak["flops"])
    return {
        "device": _device_name(device),
        "torch": str(torch.__version__),
        "threads": torch.get_num_threads(),
        "load_average_before": load,
        "config": config.to_dict(),
        "training": training,
        "generation_tokens_per_s": generation,
        "flops_per_token": flops,
        "achieved_flops": utilisation.achieved(training["tokens_per_s"]),
        "peak_matmul_flops": peak["flops"],
        "peak_matmul_flops_by_size": peak["by_size"],
        "mfu": utilisation.of(training["tokens_per_s"]),
    }


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if os.path.exists("/proc/cpuinfo"):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} CPUs)"
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs)"


def format_report(result: dict[str, Any]) -> str:
    """The benchmark as a few readable lines."""
    c, tr = result["config"], result["training"]
    m, t = c["model"], c["train"]
    load = result["load_average_before"]
    busy = f", load average {load:.2f} before the run" if load is not None else ""
    lines = [
        f"device: {result['device']}, torch {result['torch']}, {result['threads']} threads{busy}",
        f"model: {m['n_layer']} layers, {m['n_head']} heads, {m['n_embd']} wide, block {m['block_size']}, "
        f"dropout {m['dropout']}; batch {t['batch_size']}×{t['grad_accum_steps']}, {tr['dtype']}, "
        f"compile {t['compile']}",
        f"training: {tr['tokens_per_s']:,.0f} tokens/s (median step {tr['step_s_median'] * 1e3:.1f} ms; "
        f"first step {tr['first_step_s']:.2f} s"
        + (f", compile ≈ {tr['compile_s']:.1f} s" if tr["compile_s"] is not None else "")
        + ")",
        f"peak memory while training: {tr['peak_memory_bytes'] / 2**20:,.0f} MiB",
        f"MFU: {result['mfu']:.1%} = {result['flops_per_token'] / 1e6:.2f} MFLOP/token × tokens/s "
        f"= {result['achieved_flops'] / 1e9:,.1f} GFLOP/s of a measured {tr['dtype']} matmul peak of "
        f"{result['peak_matmul_flops'] / 1e9:,.1f} GFLOP/s",
    ]
    for mode, label in (("cache", "with KV cache"), ("no_cache", "without cache")):
        speeds = result["generation_tokens_per_s"][mode]
        lines.append(
            f"generation {label}: " + ", ".join(f"{n} tokens {s:,.0f} tok/s" for n, s in speeds.items())
        )
    return "\n".join(lines)
