"""Turning the last position's logits into the next character."""

import torch
import torch.nn.functional as F


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick the next id for each row of logits (B, vocab); returns (B, 1).

    temperature 0 is greedy (argmax); otherwise logits are divided by the
    temperature, cut to the top_k most likely ids (top_k larger than the
    vocabulary keeps all), then to the smallest set whose probabilities add up
    to at least top_p (nucleus sampling), and one id is drawn.
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth_best = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    if top_p is not None and top_p < 1.0:
        logits = _nucleus(logits, top_p)
    probs = F.softmax(logits, dim=-1)  # (B, vocab)
    return torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask all but the most likely ids whose cumulative probability first reaches top_p."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, vocab)
    probs = F.softmax(sorted_logits, dim=-1)
    ranked_above = probs.cumsum(dim=-1) - probs  # probability of the ids more likely than each
    drop_sorted = ranked_above >= top_p  # the most likely id always stays
    drop = torch.empty_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))
