"""Switching attention heads off: what the model does without them.

Each head's output, the hook point `blocks.L.attn.z` (B, nh, T, hs), is what c_proj reads
(the heads side by side), so switching head h off is replacing z[:, h] before c_proj reads it:

    zero   the head's output becomes 0: it adds nothing but c_proj's bias;
    mean   the head's output becomes its mean over validation text: it adds what it
           adds on average, so only what it does for this particular context is lost.

A hook on that point does the replacement, so the model's own forward pass, fast path or
explicit, runs unchanged around it. tinygpt.load(...).ablate is what `--ablate`
and `--ablate-mode` of sample, inspect and explain give.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

from tinygpt.data.corpus import validation_windows, windows_for
from tinygpt.errors import UserError
from tinygpt.explain.validation import validation_split_of
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.hooks import Hook
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
    """Each layer's mean head outputs over every position of windows (N, T), the heads side by side as
    c_proj reads them: (nh·hs,) per layer."""
    sums: dict[str, torch.Tensor] = {}

    def add(z: torch.Tensor, name: str) -> None:  # z (N, nh, T, hs)
        sums[name] = z.double().sum(dim=(0, 2)).flatten().float().cpu()  # (nh·hs,)

    was_training = model.training
    model.eval()
    try:
        with model.hooks({"blocks.*.attn.z": add}):
            model(windows)
    finally:
        model.train(was_training)
    return [sums[f"blocks.{layer}.attn.z"] / windows.numel() for layer in range(model.config.n_layer)]


@contextmanager
def ablated(
    model: GPT, heads: list[Head], mode: str = "zero", means: list[torch.Tensor] | None = None
) -> Iterator[None]:
    """Inside the block, the model runs with `heads` switched off (zero, or mean: give `means`)."""
    if mode not in MODES:
        raise UserError(f"--ablate-mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "mean" and means is None:
        raise ValueError("mean ablation needs the heads' mean outputs (mean_head_outputs)")
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def replace(layer: int, off: list[int]):
        def hook(z: torch.Tensor, name: str) -> torch.Tensor:
            z = z.clone()  # (B, nh, T, hs)
            for h in off:
                z[:, h] = 0.0 if mode == "zero" else means[layer].view(z.size(1), -1)[h].to(z)
            return z

        return hook

    with model.hooks({f"blocks.{layer}.attn.z": replace(layer, off) for layer, off in by_layer.items()}):
        yield


CHUNK_POSITIONS = 32_768  # positions one pass of each_head_off runs at most: bounds its memory


def rest_of_model(model: GPT, x: torch.Tensor, layer: int, last: int | None = None) -> torch.Tensor:
    """The logits (B, T, vocab) when the residual stream x (B, T, C) enters block `layer`: the rest of the
    model's forward pass (eval mode, no cache), through its hook points as forward runs them. With
    `last`, the logits of the last `last` positions alone (B, last, vocab): the final block computes no
    others (the earlier ones still run every position, which the later ones read)."""
    n_layer = model.config.n_layer
    for block in model.h[layer : n_layer - 1]:
        x = block(x)
    if layer < n_layer:
        x = model.h[-1](x, last=last)
    elif last is not None:
        x = x[:, -last:]
    return model.lm_head(model.hook_points.at("ln_final", model.ln_f(x)))


def head_batches(n_head: int, positions: int) -> list[torch.Tensor]:
    """The heads 0 … n_head − 1 in runs of as many as one pass takes, each copy of the input holding
    `positions` positions, at most CHUNK_POSITIONS a pass (at least one head)."""
    per_pass = max(1, CHUNK_POSITIONS // positions)
    return list(torch.arange(n_head).split(per_pass))


def zeroing(heads: torch.Tensor, N: int) -> Hook:
    """A hook on blocks.L.attn.z for a batch of len(heads) copies of N windows: in copy c, head heads[c]
    switched off (zero)."""

    def zero(z: torch.Tensor, name: str) -> torch.Tensor:
        z = z.clone().view(len(heads), N, *z.shape[1:])  # (k, N, nh, T, hs)
        z[torch.arange(len(heads)), :, heads] = 0.0
        return z.flatten(0, 1)

    return zero


OFF_POINTS = ["blocks.*.resid_pre", "blocks.*.attn.z", "blocks.*.resid_mid"]  # what each_head_off starts from


@torch.no_grad()
def each_head_off(
    model: GPT,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    found: dict[str, torch.Tensor] | None = None,
    last: int | None = None,
) -> torch.Tensor:
    """The next-character loss at every position of inputs (N, T), against targets (N, T), with each head
    switched off alone (zero): (n_layer, n_head, N, T), the numbers `with ablated(model, [(l, h)])` gives
    head by head; with `last`, at the last `last` positions alone (n_layer, n_head, N, last).

    Switching off head h of layer l changes nothing before c_proj of layer l reads the heads' outputs,
    so every head of a layer starts from one pass's activations at OFF_POINTS (`found`, else from one
    pass here): the windows are repeated once per head in the batch, copy h without head h, and only
    the rest of the model runs, in chunks of at most CHUNK_POSITIONS positions."""
    cfg = model.config
    N, T = inputs.shape
    if found is None:
        _, found = model.run_with_cache(inputs, names=OFF_POINTS)
    scored = targets if last is None else targets[:, -last:]  # (N, S)
    out = torch.empty(cfg.n_layer, cfg.n_head, *scored.shape)
    for layer in range(cfg.n_layer):
        for heads in head_batches(cfg.n_head, N * T):
            k, first = len(heads), int(heads[0])
            logits = without_heads(model, found, layer, heads, N, last)  # (k·N, S, vocab)
            wanted = scored.repeat(k, 1).flatten()  # (k·N·S,)
            lost = F.cross_entropy(logits.flatten(0, 1).float(), wanted, reduction="none")
            out[layer, first : first + k] = lost.view(k, *scored.shape).cpu()
    return out


def without_heads(
    model: GPT,
    found: dict[str, torch.Tensor],
    layer: int,
    heads: torch.Tensor,
    N: int,
    last: int | None = None,
) -> torch.Tensor:
    """The logits (k·N, T, vocab) of N windows repeated k = len(heads) times, head heads[c] of `layer`
    switched off (zero) in copy c, from one pass's activations at OFF_POINTS; with `last`, those of the
    last `last` positions alone (k·N, last, vocab).

    c_proj is linear, so zeroing head h's output z_h (N, T, hs) takes z_h·W_hᵀ out of what attention
    adds to the stream (W_h (C, hs): c_proj's columns that read head h; its bias stays, as it does when
    z_h is zeroed): the layer's attention is not run again, only its MLP and the blocks after it. A hook
    on the layer's attn_out or resid_mid sees attention's whole output, so then the layer runs again
    from the stream entering it, head h's output zeroed before c_proj reads it."""
    k = len(heads)
    if any(model.hook_points.watched(f"blocks.{layer}.{site}") for site in ("attn_out", "resid_mid")):
        with model.hooks({f"blocks.{layer}.attn.z": zeroing(heads, N)}):
            return rest_of_model(model, found[f"blocks.{layer}.resid_pre"].repeat(k, 1, 1), layer, last)
    C, nh = model.config.n_embd, model.config.n_head
    w = model.h[layer].attn.c_proj.weight.view(C, nh, -1)[:, heads]  # (C, k, hs)
    z = found[f"blocks.{layer}.attn.z"][:, heads]  # (N, k, T, hs)
    written = torch.einsum("nktd,ckd->kntc", z, w)  # (k, N, T, C): what each head adds to the stream
    x = (found[f"blocks.{layer}.resid_mid"] - written).flatten(0, 1)  # (k·N, T, C)
    if last is not None and layer == model.config.n_layer - 1:
        x = x[:, -last:]  # the MLP reads each position alone: the scored ones are enough
    return rest_of_model(model, model.h[layer].feed_forward(x), layer + 1, last)


MEAN_POSITIONS = 1024  # validation positions --ablate-mode mean averages over: 16 windows of 64, 4 of 256
MEAN_WINDOWS = 16  # at most, each block_size long


def mean_windows(val: torch.Tensor, block_size: int) -> torch.Tensor:
    """The validation windows whose mean head outputs --ablate-mode mean puts in a head's place: (N, T),
    inputs only, MEAN_POSITIONS positions' worth (at most MEAN_WINDOWS windows, or all val holds)."""
    return validation_windows(val, block_size, windows_for(MEAN_POSITIONS, block_size, MEAN_WINDOWS))[:, :-1]


def validation_means(model: GPT, saved: Checkpoint, checkpoint: str | Path) -> list[torch.Tensor]:
    """What --ablate-mode mean puts in a head's place: each layer's mean head outputs, (nh·hs,) per
    layer, over mean_windows of the validation text the checkpoint was trained on."""
    block = model.config.block_size
    windows = mean_windows(validation_split_of(saved, block, checkpoint), block)
    return mean_head_outputs(model, windows.to(model.wte.weight.device))
