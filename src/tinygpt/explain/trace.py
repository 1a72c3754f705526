"""Run one prompt through a model and keep every number on the way to the logits that the views show.

The forward pass is the model's own: its explicit attention path (the plain
formula in tinygpt.attention) records q, k, v, the weights, each head's output
and what each layer adds to the residual stream; forward hooks on the embeddings
and on each block's first layer norm catch the rest.
"""

from dataclasses import dataclass

import torch

from tinygpt.errors import UserError
from tinygpt.model import GPT, GPTConfig


@dataclass
class LayerTrace:
    """One block's attention on one prompt (T positions, nh heads of hs dimensions, width C)."""

    resid: torch.Tensor  # (T, C) the residual stream entering the block
    ln_1: torch.Tensor  # (T, C) its layer norm: what attention reads
    q: torch.Tensor  # (nh, T, hs)
    k: torch.Tensor  # (nh, T, hs)
    v: torch.Tensor  # (nh, T, hs)
    weights: torch.Tensor  # (nh, T, T) softmax(q·kᵀ/√hs) with the causal mask
    heads: torch.Tensor  # (nh, T, hs) each head's weighted sum of values
    contrib: torch.Tensor  # (nh, T, C) each head's output through its slice of c_proj (no bias)
    out: torch.Tensor  # (T, C) what the attention layer adds to the residual stream: Σ contrib + bias


@dataclass
class Trace:
    """A prompt's trip through the model: embeddings, every attention layer, the logits."""

    ids: list[int]
    tok_emb: torch.Tensor  # (T, C) wte rows of the prompt's characters
    pos_emb: torch.Tensor  # (T, C) wpe rows 0 … T-1
    layers: list[LayerTrace]
    logits: torch.Tensor  # (T, vocab) scores for the next character after each position


@torch.no_grad()
def trace_prompt(model: GPT, ids: list[int]) -> Trace:
    """Every intermediate the views need, from one forward pass of `ids` (at most block_size of them)."""
    model.eval()
    caught: dict[str, torch.Tensor] = {}
    hooks = [
        model.wte.register_forward_hook(lambda m, args, out: caught.__setitem__("tok", out)),
        model.wpe.register_forward_hook(lambda m, args, out: caught.__setitem__("pos", out)),
    ]
    for i, block in enumerate(model.h):
        hooks.append(block.ln_1.register_forward_hook(_catch_norm(caught, i)))
    idx = torch.tensor([ids], device=model.wte.weight.device)  # (1, T)
    try:
        with model.explicit_attention(record=True) as records:
            logits, _ = model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    layers = []
    for i, (block, rec) in enumerate(zip(model.h, records, strict=True)):
        heads = rec["heads"][0]  # (nh, T, hs)
        layers.append(
            LayerTrace(
                resid=caught[f"resid{i}"][0],
                ln_1=caught[f"ln_1{i}"][0],
                q=rec["q"][0],
                k=rec["k"][0],
                v=rec["v"][0],
                weights=rec["weights"][0],
                heads=heads,
                contrib=head_contributions(block.attn.c_proj.weight, heads),
                out=rec["out"][0],
            )
        )
    return Trace(
        ids=list(ids), tok_emb=caught["tok"][0], pos_emb=caught["pos"], layers=layers, logits=logits[0]
    )


def head_contributions(proj_weight: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """Each head's output pushed through its own columns of c_proj: (C, C), (nh, T, hs) -> (nh, T, C).

    c_proj reads the heads side by side, so its output is the sum over heads of
    these parts, plus the bias.
    """
    nh, T, hs = heads.shape
    slices = proj_weight.view(-1, nh, hs).transpose(0, 1)  # (nh, C, hs): head h's columns
    return heads @ slices.transpose(1, 2)  # (nh, T, C)


def _catch_norm(caught: dict[str, torch.Tensor], layer: int):
    def hook(module, args, out):
        caught[f"resid{layer}"] = args[0]
        caught[f"ln_1{layer}"] = out

    return hook


def chosen(value: int | None, count: int, what: str) -> list[int]:
    """[value] checked against range(count), or every index when value is None."""
    if value is None:
        return list(range(count))
    if not 0 <= value < count:
        raise UserError(f"{what} {value} does not exist: this model has {count} {what}s (0 … {count - 1})")
    return [value]


def focus(
    config: GPTConfig, ids: list[int], layer: int, head: int, token: int | None
) -> tuple[int, int, int]:
    """The (layer, head, token) to follow through a prompt's ids, each checked; token None: the last."""
    (layer,) = chosen(layer, config.n_layer, "layer")
    (head,) = chosen(head, config.n_head, "head")
    token = len(ids) - 1 if token is None else token
    if not 0 <= token < len(ids):
        raise UserError(f"--token {token} is outside the prompt: use a position from 0 to {len(ids) - 1}")
    return layer, head, token
