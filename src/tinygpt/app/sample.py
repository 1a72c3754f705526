"""Sampling: its options checked, and continuations of a prompt, streamed as they are made
(`tinygpt sample` and `tinygpt.load(...).sample`)."""

import io
import math
from dataclasses import dataclass
from typing import TextIO

import torch

from tinygpt.config.run_config import TrainSection
from tinygpt.errors import UserError
from tinygpt.generation.sampling import stream as stream_ids
from tinygpt.model import GPT
from tinygpt.threads import threads_for
from tinygpt.tokenizer import CharTokenizer

SEED = TrainSection.__dataclass_fields__["seed"].metadata  # one range of seeds, sampling's as training's


@dataclass(frozen=True)
class Sampling:
    """How continuations are drawn, checked when made: a bad value raises one UserError that names its
    option and what to use instead."""

    max_new_tokens: int
    temperature: float
    top_k: int | None
    top_p: float | None
    num_samples: int
    seed: int

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise UserError(f"--max-new-tokens {self.max_new_tokens} is negative; use 0 or more")
        _check_temperature(self.temperature)
        if self.top_k is not None and self.top_k < 1:
            raise UserError(f"--top-k {self.top_k} is below 1; use 1 or more, or leave it out")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise UserError(f"--top-p {self.top_p} is outside (0, 1]; use e.g. 0.9, or leave it out")
        if self.num_samples < 1:
            raise UserError(f"--num-samples {self.num_samples} is below 1; use 1 or more")
        if not SEED["low"] <= self.seed <= SEED["high"]:
            raise UserError(
                f"--seed {self.seed} is not allowed; --seed must be an integer ≥ {SEED['low']} and "
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


def continuations(
    model: GPT,
    tokenizer: CharTokenizer,
    prompt: str,
    ids: list[int],
    sampling: Sampling,
    use_cache: bool = True,
    stream: TextIO | None = None,
    threads: int | str = "auto",
) -> list[str]:
    """sampling.num_samples continuations of prompt (its ids: `ids`), each beginning with the prompt, drawn
    with one generator seeded with sampling.seed; stream: also written there as they are made, a line
    between two. threads: torch's CPU threads, a count or auto (measured on the first steps,
    tinygpt.threads), as checked by tinygpt.threads.threads_value."""
    dev = model.wte.weight.device
    generator = torch.Generator(device=dev).manual_seed(sampling.seed)
    out = stream or io.StringIO()
    idx = torch.tensor([ids], dtype=torch.long, device=dev)  # (1, T)
    options = (sampling.max_new_tokens, sampling.temperature, sampling.top_k, sampling.top_p)
    texts = []
    with threads_for(threads, "--threads", dev) as chosen:  # one choice for all the samples
        for i in range(sampling.num_samples):
            if i:
                out.write("\n" + "-" * 40 + "\n")
            out.write(prompt)
            out.flush()
            made = []
            for next_id in stream_ids(model, idx, *options, generator, use_cache, chosen):
                made.append(tokenizer.chars[next_id.item()])
                out.write(made[-1])
                out.flush()
            texts.append(prompt + "".join(made))
    out.write("\n")
    return texts
