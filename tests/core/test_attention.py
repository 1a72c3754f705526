import math

import pytest
import torch
import torch.nn.functional as F

from tinygpt.attention import attention, causal_mask, stable_softmax

Q = torch.tensor([[1.0, 0.5]])  # (1, d): one query
K = torch.tensor([[1.0, 0.0], [0.5, 1.0], [1.5, 1.0]])  # (3, d)
V = torch.tensor([[0.5, 1.0], [1.0, 0.0], [1.5, 1.0]])  # (3, d)


def truncated(x: torch.Tensor) -> list[float]:
    """Cut to 3 decimals, as the published example writes its figures (1.12762 → 1.127)."""
    return (torch.floor(x * 1000) / 1000).flatten().tolist()


def test_worked_example_matches_the_published_numbers():
    out, weights = attention(Q, K, V, causal=True)  # one query after two earlier keys sees all three
    scores = (Q @ K.T) / math.sqrt(2)
    assert truncated(scores) == pytest.approx([0.707, 0.707, 1.414])
    assert truncated(weights) == pytest.approx([0.248, 0.248, 0.503])
    assert truncated(out) == pytest.approx([1.127, 0.751])
    # the exact values behind the 3-decimal figures
    assert torch.allclose(out, torch.tensor([[1.12762, 0.75175]]), atol=1e-5)


def test_softmax_subtracts_the_row_max_so_huge_scores_stay_finite():
    scores = torch.tensor([[1e4, -1e4, 1e4 - 1.0]])
    weights = stable_softmax(scores)
    assert torch.isfinite(weights).all()
    e = math.exp(-1.0)
    assert torch.allclose(weights, torch.tensor([[1 / (1 + e), 0.0, e / (1 + e)]]))


def test_future_positions_get_exactly_zero_weight():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 4).unbind(0)  # (B=2, T=5, d=4) each
    _, weights = attention(q, k, v)
    upper = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    assert (weights[:, upper] == 0).all()
    assert torch.allclose(weights.sum(-1), torch.ones(2, 5))


def test_matches_torch_fused_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 3, 7, 8).unbind(0)  # (B, nh, T, hs)
    out, _ = attention(q, k, v)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)


def test_causal_mask_aligns_queries_to_the_end_of_the_keys():
    mask = causal_mask(2, 4)  # two new queries at positions 2 and 3
    assert mask.tolist() == [[True, True, True, False], [True, True, True, True]]
