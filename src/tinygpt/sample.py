"""Sampling text from a checkpoint, streamed to the terminal as it is made."""

import sys
from pathlib import Path
from typing import TextIO

import torch

from tinygpt.checkpoint import load_checkpoint
from tinygpt.errors import UserError
from tinygpt.tokenizer import CharTokenizer
from tinygpt.train import pick_device

EMPTY_PROMPT_START = "\n"  # what an empty prompt starts from: the character that ends every line


def latest_checkpoint(root: str | Path = "checkpoints") -> Path:
    """The most recently written best.pt under root."""
    found = sorted(Path(root).glob("**/best.pt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise UserError(
            f"no checkpoint found under {root}/; train one first "
            "(python scripts/train.py --config configs/cpu.yaml) or pass --checkpoint"
        )
    return found[-1]


def prompt_ids(tokenizer: CharTokenizer, prompt: str) -> list[int]:
    """The prompt's ids. An empty prompt starts from a newline, as if at the start of a line."""
    if prompt:
        return tokenizer.encode(prompt)
    if EMPTY_PROMPT_START not in tokenizer.ids:
        raise UserError(
            "the prompt is empty and this model's vocabulary has no newline to start "
            "from; give a prompt with --prompt"
        )
    return tokenizer.encode(EMPTY_PROMPT_START)


def check_sampling_options(
    max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None, num_samples: int
) -> None:
    if max_new_tokens < 0:
        raise UserError(f"--max-new-tokens {max_new_tokens} is negative; use 0 or more")
    if not temperature >= 0:
        raise UserError(f"--temperature {temperature} is negative; use 0 (greedy) or more")
    if top_k is not None and top_k < 1:
        raise UserError(f"--top-k {top_k} is below 1; use 1 or more, or leave it out")
    if top_p is not None and not 0 < top_p <= 1:
        raise UserError(f"--top-p {top_p} is outside (0, 1]; use e.g. 0.9, or leave it out")
    if num_samples < 1:
        raise UserError(f"--num-samples {num_samples} is below 1; use 1 or more")


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
    out: TextIO = sys.stdout,
) -> list[str]:
    """Print num_samples continuations of prompt, character by character; return them too."""
    check_sampling_options(max_new_tokens, temperature, top_k, top_p, num_samples)
    path = Path(checkpoint) if checkpoint else latest_checkpoint()
    dev = pick_device(device)
    model, tokenizer, _ = load_checkpoint(path, device=dev)
    context = prompt_ids(tokenizer, prompt)
    top_k = min(top_k, tokenizer.vocab_size) if top_k is not None else None
    generator = torch.Generator(device=dev).manual_seed(seed)
    texts = []
    for i in range(num_samples):
        if i:
            out.write("\n" + "-" * 40 + "\n")
        out.write(prompt)
        out.flush()
        idx = torch.tensor([context], dtype=torch.long, device=dev)  # (1, T)
        made = []
        for next_id in model.stream(idx, max_new_tokens, temperature, top_k, top_p, generator, use_cache):
            made.append(tokenizer.chars[next_id.item()])
            out.write(made[-1])
            out.flush()
        texts.append(prompt + "".join(made))
    out.write("\n")
    return texts
