"""Will the model fit? A check before any weight is allocated.

A config with a typo in a size (n_embd: 200000) would otherwise ask the
allocator for terabytes and end in an out-of-memory crash, or a machine that
swaps for minutes first. Training needs, per parameter, at least its float32
weight, its gradient and AdamW's two moment estimates: 16 bytes. Activations
come on top, so this is a lower bound and refuses only what cannot work.
"""

import os
from pathlib import Path

import torch

from tinygpt.errors import UserError
from tinygpt.model import GPTConfig

TRAINING_BYTES_PER_PARAMETER = 16  # weight, gradient, AdamW's exp_avg and exp_avg_sq, all float32
GiB = 2**30


def parameter_count(c: GPTConfig) -> int:
    """GPT(c).num_params(), computed from the sizes alone (the tied LM head counted once)."""
    C = c.n_embd
    layer_norm = C * (2 if c.bias else 1)  # gain, and a bias when there are biases
    linear_biases = (3 * C + C + 4 * C + C) if c.bias else 0  # qkv, attention out, MLP in, MLP out
    block = 12 * C * C + linear_biases + 2 * layer_norm  # qkv 3C², out C², MLP 4C² + 4C²
    return c.vocab_size * C + c.block_size * C + c.n_layer * block + layer_norm


def free_memory(device: torch.device) -> int | None:
    """Bytes free for new tensors on `device`, or None where it cannot be known."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        meminfo = Path("/proc/meminfo")
        if meminfo.is_file():  # Linux: what can be had without swapping
            for line in meminfo.read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        try:  # elsewhere: physical memory
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None
    return None


def check_fits(c: GPTConfig, device: torch.device) -> None:
    """Raise UserError when training the model could not fit in the device's free memory."""
    free = free_memory(device)
    needed = parameter_count(c) * TRAINING_BYTES_PER_PARAMETER
    if free is None or needed <= free:
        return
    raise UserError(
        f"the model is too large to train here: {parameter_count(c):,} parameters need at least "
        f"{needed / GiB:,.1f} GiB (weights, gradients and AdamW state), and {device.type} has "
        f"{free / GiB:,.1f} GiB free; make model.n_embd or model.n_layer smaller"
    )
