"""The `sample` command: text from a checkpoint, streamed to the terminal as it is made."""

import math
import sys
from pathlib import Path
from typing import TextIO

import torch

from tinygpt.ablate import ablation
from tinygpt.checkpoint import chosen_checkpoint, load_checkpoint
from tinygpt.config import TrainSection
from tinygpt.device import pick_device
from tinygpt.errors import UserError
from tinygpt.generate import stream
from tinygpt.tokenizer import prompt_ids

SEED = TrainSection.__dataclass_fields__["seed"].metadata  # one range of seeds, sampling's as training's


def check_sampling_options(
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    num_samples: int,
    seed: int,
) -> None:
    if max_new_tokens < 0:
        raise UserError(f"--max-new-tokens {max_new_tokens} is negative; use 0 or more")
    _check_temperature(temperature)
    if top_k is not None and top_k < 1:
        raise UserError(f"--top-k {top_k} is below 1; use 1 or more, or leave it out")
    if top_p is not None and not 0 < top_p <= 1:
        raise UserError(f"--top-p {top_p} is outside (0, 1]; use e.g. 0.9, or leave it out")
    if num_samples < 1:
        raise UserError(f"--num-samples {num_samples} is below 1; use 1 or more")
    if not SEED["low"] <= seed <= SEED["high"]:
        raise UserError(
            f"--seed {seed} is not allowed; --seed must be an integer ≥ {SEED['low']} and "
            f"≤ {SEED['high']}, as train.seed"
        )


def _check_temperature(temperature: float) -> None:
    if math.isnan(temperature):
        raise UserError(f"--temperature {temperature} is not a number; use 0 (greedy) or more, e.g. 0.8")
    if temperature < 0:
        raise UserError(f"--temperature {temperature} is negative; use 0 (greedy) or more")
    if math.isinf(temperature):
        raise UserError(
            f"--temperature {temperature} is not a finite number; use 0 (greedy) or more, e.g. 0.8 "
            "(a large temperature draws every character about evenly)"
        )


def sample(
    checkpoint: str | Path | None = None,
    prompt: str = "",
    max_new_tokens: int = 500,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    num_samples: int = 1,
    seed: int = 1337,
    device: str = "auto",
    use_cache: bool = True,
    out: TextIO | None = None,
    ablate: str | None = None,
    ablate_mode: str = "zero",
) -> list[str]:
    """Print num_samples continuations of prompt, character by character; return them too.

    ablate: heads to switch off, as LAYER.HEAD[,…] (see tinygpt.ablate), in ablate_mode.
    """
    check_sampling_options(max_new_tokens, temperature, top_k, top_p, num_samples, seed)
    out = out or sys.stdout  # looked up now, not when the module was imported: a redirected stdout counts
    path = chosen_checkpoint(checkpoint)
    dev = pick_device(device)
    model, tokenizer, _ = load_checkpoint(path, device=dev)
    context = prompt_ids(tokenizer, prompt, model.config.block_size)
    generator = torch.Generator(device=dev).manual_seed(seed)
    texts = []
    with ablation(model, path, ablate, ablate_mode):
        for i in range(num_samples):
            if i:
                out.write("\n" + "-" * 40 + "\n")
            out.write(prompt)
            out.flush()
            idx = torch.tensor([context], dtype=torch.long, device=dev)  # (1, T)
            made = []
            for next_id in stream(
                model, idx, max_new_tokens, temperature, top_k, top_p, generator, use_cache
            ):
                made.append(tokenizer.chars[next_id.item()])
                out.write(made[-1])
                out.flush()
            texts.append(prompt + "".join(made))
    out.write("\n")
    return texts
