"""Generation: the refill rule at block_size, sampling filters, streaming; the model takes the cache.

Without a cache, every new character re-runs the whole context through every
layer. With it, each step computes q, k, v for the one new position only and
attends over the stored keys and values. Positions are learned and absolute, so
a full cache cannot just drop its oldest entry (every position would shift): it
is refilled from the most recent block_size // 2 characters, one pass over half
a block every block_size // 2 steps. Without the cache every step re-reads the
last block_size characters: an exact sliding window, at a full pass per character.
"""

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from tinygpt.errors import UserError
from tinygpt.generation import fused_step as decode
from tinygpt.generation.kv_cache import KVCache

if TYPE_CHECKING:
    from tinygpt.model import GPT
    from tinygpt.threads import Threads


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick the next id for each row of logits (B, vocab); returns (B, 1).

    temperature 0 is greedy (argmax). Otherwise logits are cut to the top_k most likely
    ids (top_k larger than the vocabulary keeps all), divided by the temperature, cut to
    the smallest set whose probabilities add up to at least top_p (nucleus sampling; the
    most likely id always stays), and one id is drawn. Any temperature > 0 is safe: the
    logits are shifted so that the largest is 0 and divided in float64, so a temperature
    too small for float32 gives the most likely id its whole weight (greedy, ties drawn
    evenly) instead of inf − inf, and a huge one gives nearly even weights.
    """
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float()
    if top_k is not None and top_k < logits.size(-1):
        kth_best = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    if temperature != 1.0:  # softmax shifts by the largest itself: temperature 1 needs nothing here
        shifted = logits - logits.max(dim=-1, keepdim=True).values  # ≤ 0, the largest exactly 0
        logits = (shifted.double() / temperature).float()  # 0 stays 0; what underflows becomes -inf
    if top_p is not None and top_p < 1.0:
        logits = _nucleus(logits, top_p)
    return draw(F.softmax(logits, dim=-1), generator)  # (B, 1)


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One id a row of probs (B, vocab), id i with probability probs[:, i]: returns (B, 1).

    Each id gets an exponential clock of rate p_i (an Exp(1) draw e_i divided by p_i), and the
    first to ring wins, which is id i with probability p_i: the largest p_i / e_i. Three kernels
    where torch.multinomial checks its input and sums it first (about 8x the time for a
    65-character vocabulary, BENCHMARKS.md). The clocks are kept above 0 so that an id of
    probability 0 can never win (0 / 0 would be NaN, which argmax would pick).
    """
    clocks = torch.empty_like(probs).exponential_(generator=generator).clamp_(min=1e-30)  # (B, vocab)
    return (probs / clocks).argmax(dim=-1, keepdim=True)


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask all but the most likely ids whose cumulative probability first reaches top_p."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, vocab)
    probs = F.softmax(sorted_logits, dim=-1)
    ranked_above = probs.cumsum(dim=-1) - probs  # probability of the ids more likely than each
    drop_sorted = ranked_above >= top_p
    drop_sorted[:, 0] = False  # the most likely id always stays, even for a top_p that rounds to 0
    drop = torch.empty_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


@torch.inference_mode()  # no autograd bookkeeping at all: cheaper per step than no_grad
def stream(
    model: "GPT",
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    threads: "Threads | None" = None,
) -> Iterator[torch.Tensor]:
    """Yield the next character ids (B, 1) after idx (B, T), one step at a time, as they are sampled.

    With use_cache (the default) each step runs one position through the model
    (a tinygpt.generation.fused_step.Decoder, unless a hook point is watched); a full cache is refilled
    from the last block_size // 2 characters (see the module docstring). With
    use_cache=False each step re-reads the last block_size characters. threads (tinygpt.threads):
    the one-position steps run through it, which measures them to choose torch's thread count.
    """
    block_size = model.config.block_size
    context = idx[:, -block_size:]
    cache = KVCache(model.config, idx.size(0)) if use_cache else None
    decoder = decode.Decoder(model) if use_cache and decode.usable(model, idx.device) else None
    run = threads.run if threads is not None else _call
    hooked = sorted(model.hook_points.active)  # what replaces activations may leave float32's numbers
    for _ in range(max_new_tokens):
        if cache is None:
            logits = model(context[:, -block_size:], last_only=True)[0][:, -1, :]  # (B, vocab)
        elif cache.length == 0:  # a fresh or refilled cache: the whole context in one pass
            logits = model(context, cache=cache, last_only=True)[0][:, -1, :]
        elif decoder is not None:  # the one new position, as the model computes it (fused_step.py)
            logits = run(decoder.step, context[:, -1], cache)
        else:  # the one new position through the modules: a hook point is watched, or autocast is on
            logits = model(context[:, -1:], cache=cache, last_only=True)[0][:, -1, :]
        if hooked and not torch.isfinite(logits).all():
            raise _not_numbers(hooked)
        next_id = sample_next(logits, temperature, top_k, top_p, generator)  # (B, 1)
        yield next_id
        context = torch.cat([context, next_id], dim=1)[:, -block_size:]
        if cache is not None and cache.length == block_size:  # full: refill from the recent half
            cache.reset()
            context = context[:, -max(1, block_size // 2) :]


def _not_numbers(hooked: list[str]) -> UserError:
    """Logits that are NaN or infinite would be sampled as the first character, every time: said instead."""
    return UserError(
        f"the model's logits are no longer numbers (NaN or infinite) with hooks on {', '.join(hooked)}; "
        "make the hooks' replacements finite (a NaN, or a value past float32, spreads to every logit)"
    )


def _call(fn: Callable[..., torch.Tensor], *args: object) -> torch.Tensor:
    return fn(*args)


@torch.no_grad()
def generate(
    model: "GPT",
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """idx (B, T) extended by max_new_tokens sampled characters: (B, T + new), as `stream` samples them."""
    new = stream(model, idx, max_new_tokens, temperature, top_k, top_p, generator, use_cache)
    return torch.cat([idx, *new], dim=1)
