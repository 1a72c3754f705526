"""Run one prompt through a model and keep every number on the way to the logits that the views show.

The forward pass is the model's own, read at its named hook points (tinygpt.hooks): the
embeddings, the stream entering each block and its layer norm, q, k, v, the weights (which
run attention through the plain formula in tinygpt.attention), each head's output and what
each layer adds to the residual stream.
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
    idx = torch.tensor([ids], device=model.wte.weight.device)  # (1, T)
    logits, found = model.run_with_cache(idx, names=TRACED)
    layers = []
    for i, block in enumerate(model.h):
        at = {site: found[f"blocks.{i}.{site}"][0] for site in TRACED_SITES}
        layers.append(
            LayerTrace(
                resid=at["resid_pre"],
                ln_1=at["ln1"],
                q=at["attn.q"],
                k=at["attn.k"],
                v=at["attn.v"],
                weights=at["attn.pattern"],
                heads=at["attn.z"],
                contrib=head_contributions(block.attn.c_proj.weight, at["attn.z"]),
                out=at["attn_out"],
            )
        )
    return Trace(
        ids=list(ids), tok_emb=found["embed"][0], pos_emb=found["pos_embed"], layers=layers, logits=logits[0]
    )


TRACED_SITES = ("resid_pre", "ln1", "attn.q", "attn.k", "attn.v", "attn.pattern", "attn.z", "attn_out")
TRACED = ["embed", "pos_embed", *(f"blocks.*.{site}" for site in TRACED_SITES)]


def head_contributions(proj_weight: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """Each head's output pushed through its own columns of c_proj: (C, C), (nh, T, hs) -> (nh, T, C).

    c_proj reads the heads side by side, so its output is the sum over heads of
    these parts, plus the bias.
    """
    nh, T, hs = heads.shape
    slices = proj_weight.view(-1, nh, hs).transpose(0, 1)  # (nh, C, hs): head h's columns
    return heads @ slices.transpose(1, 2)  # (nh, T, C)


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
    """The (layer, head, token) to follow through a prompt's ids, each checked; token None: the last, and
    a negative one counts from the end (-1: the last), as --position does."""
    (layer,) = chosen(layer, config.n_layer, "layer")
    (head,) = chosen(head, config.n_head, "head")
    token = len(ids) - 1 if token is None else token
    if not -len(ids) <= token < len(ids):
        raise UserError(
            f"--token {token} is outside the prompt: use a position from 0 to {len(ids) - 1}, "
            f"or -{len(ids)} … -1 counting from the end"
        )
    return layer, head, token % len(ids)
