"""The attention formula, written out once: softmax(q·kᵀ/√d + mask)·v.

This plain function is what the model's explicit attention path runs, and what
the worked examples, the step-by-step explainer and the tests check against.
The model's fast path (torch's scaled_dot_product_attention) computes the same
thing in fused kernels.
"""

import math

import torch
import torch.nn.functional as F


def causal_mask(t_query: int, t_key: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean mask (t_query, t_key): True where query i may look at key j.

    Queries are the last `t_query` of the `t_key` positions (as when a KV cache
    holds earlier keys), so query i sits at position t_key - t_query + i and sees
    every key at or before that position.
    """
    offset = t_key - t_query
    rows = torch.arange(t_query, device=device).unsqueeze(1) + offset  # (Tq, 1)
    cols = torch.arange(t_key, device=device).unsqueeze(0)  # (1, Tk)
    return cols <= rows  # (Tq, Tk)


def scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q·kᵀ/√d for every query and key: (..., Tq, d), (..., Tk, d) -> (..., Tq, Tk)."""
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))


def stable_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis with the row maximum subtracted first.

    Subtracting the maximum leaves the result unchanged (it cancels between the
    numerator and the sum) but keeps exp() from overflowing, so scores of ±1e4
    still give finite weights. Masked entries (-inf) become exactly 0.
    """
    row_max = scores.amax(dim=-1, keepdim=True)  # (..., Tq, 1)
    exps = torch.exp(scores - row_max)
    return exps / exps.sum(dim=-1, keepdim=True)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, step by step.

    Args:
        q: queries (..., Tq, d).
        k: keys (..., Tk, d).
        v: values (..., Tk, d_v).
        causal: mask out keys after each query's position (-inf before the
            softmax, so their weight is exactly 0).
        dropout_p: dropout applied to the weights (training only).

    Returns:
        (output (..., Tq, d_v), weights (..., Tq, Tk)); the weights are those
        before dropout, each row summing to 1.

    Worked example (one query, three keys, d = 2): q = [1.0, 0.5],
    k = [[1.0, 0.0], [0.5, 1.0], [1.5, 1.0]], v = [[0.5, 1.0], [1.0, 0.0], [1.5, 1.0]]
    give scaled scores [0.707, 0.707, 1.414], weights [0.248, 0.248, 0.503]
    and output [1.127, 0.751].
    """
    weights = attention_pattern(q, k, causal)  # (..., Tq, Tk)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights  # (..., Tq, d_v), (..., Tq, Tk)


def attention_pattern(q: torch.Tensor, k: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """The weights alone: softmax(q·kᵀ/√d), keys after each query masked out when causal; (..., Tq, Tk)."""
    scores = scaled_scores(q, k)  # (..., Tq, Tk)
    if causal:
        allowed = causal_mask(q.size(-2), k.size(-2), device=q.device)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return stable_softmax(scores)
