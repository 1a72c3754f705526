"""Switching attention heads off: what the model does without them.

A layer's heads are concatenated, (B, T, nh·hs), and read by one projection,
c_proj. Head h of that layer is the slice [h·hs, (h+1)·hs) of c_proj's input, so
switching it off is replacing that slice before c_proj reads it:

    zero   the head's output becomes 0: it adds nothing but c_proj's bias;
    mean   the head's output becomes its mean over validation text: it adds what it
           adds on average, so only what it does for this particular context is lost.

A forward pre-hook on c_proj does the replacement, so the model's own forward pass,
fast path or explicit, runs unchanged around it. tinygpt.load(...).ablate is what `--ablate`
and `--ablate-mode` of sample, inspect and explain give.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from tinygpt.data.corpus import validation_windows
from tinygpt.errors import UserError
from tinygpt.explain.validation import validation_split_of
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.model import GPT

Head = tuple[int, int]  # (layer, head)
MODES = ("zero", "mean")


def parse_heads(text: str, n_layer: int, n_head: int) -> list[Head]:
    """'1.2,0.3' -> [(1, 2), (0, 3)], each checked against the model's sizes."""
    heads = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        layer, dot, head = part.partition(".")
        if not dot or not layer.isdigit() or not head.isdigit():
            raise UserError(f"--ablate {part!r}: write each head as LAYER.HEAD, e.g. --ablate 2.0,3.1")
        if int(layer) >= n_layer or int(head) >= n_head:
            raise UserError(
                f"--ablate {part}: this model has layers 0 … {n_layer - 1} and heads 0 … {n_head - 1}"
            )
        heads.append((int(layer), int(head)))
    if not heads:
        raise UserError("--ablate needs at least one head, e.g. --ablate 2.0")
    return heads


@torch.no_grad()
def mean_head_outputs(model: GPT, windows: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's mean c_proj input over every position of windows (N, T): (nh·hs,) per layer."""
    sums: list[torch.Tensor] = [torch.zeros(model.config.n_embd) for _ in model.h]

    def catch(layer: int):
        def hook(module, args):
            sums[layer] += args[0].double().sum(dim=(0, 1)).float().cpu()

        return hook

    hooks = [block.attn.c_proj.register_forward_pre_hook(catch(i)) for i, block in enumerate(model.h)]
    was_training = model.training
    model.eval()
    try:
        model(windows)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return [s / windows.numel() for s in sums]


@contextmanager
def ablated(
    model: GPT, heads: list[Head], mode: str = "zero", means: list[torch.Tensor] | None = None
) -> Iterator[None]:
    """Inside the block, the model runs with `heads` switched off (zero, or mean: give `means`)."""
    if mode not in MODES:
        raise UserError(f"--ablate-mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "mean" and means is None:
        raise ValueError("mean ablation needs the heads' mean outputs (mean_head_outputs)")
    hs = model.config.head_size
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def replace(layer: int, off: list[int]):
        def hook(module, args):
            merged = args[0].clone()  # (B, T, C): the heads side by side
            for h in off:
                part = slice(h * hs, (h + 1) * hs)
                merged[..., part] = 0.0 if mode == "zero" else means[layer][part].to(merged)
            return (merged,)

        return hook

    hooks = [
        model.h[layer].attn.c_proj.register_forward_pre_hook(replace(layer, off))
        for layer, off in by_layer.items()
    ]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


MEAN_WINDOWS = 16  # validation windows (each block_size long) that --ablate-mode mean averages over


def validation_means(model: GPT, saved: Checkpoint, checkpoint: str | Path) -> list[torch.Tensor]:
    """What --ablate-mode mean puts in a head's place: each layer's mean c_proj input, (nh·hs,) per
    layer, over MEAN_WINDOWS windows of the validation text the checkpoint was trained on."""
    block = model.config.block_size
    val = validation_split_of(saved, block, checkpoint)
    windows = validation_windows(val, block, MEAN_WINDOWS)[:, :-1]  # (N, T): inputs only
    return mean_head_outputs(model, windows.to(model.wte.weight.device))
