"""Every head described in words: where it looks and at what, from its attention on validation text.

A role label (tinygpt.explain.heads) names a head only when one score clears its
threshold; most heads clear none. This measures, for every head, on the same
validation windows:

    offsets   the share of its attention that lands 0, 1, 2, 3, 4-7, 8-15 and 16+
              characters back (each query's weights sum to 1, so the shares do too;
              a query at position i can look at most i back, so the far buckets are
              reachable from fewer queries)
    targets   the characters it attends to: the share of its attention landing on
              positions holding each character, and that share over what attention
              spread evenly over the same keys would give (its lift: 1 is no
              preference, 3 is three times as much as an even spread)
    sources   for its most-attended character, the characters it is attended from:
              the queries that give it the largest mean weight

and `describe` turns them into one line: the offsets that hold at least half its
attention, the characters it prefers (a lift of at least LIFT and a share of at least
SHARE), its entropy, and what switching it off costs, when that was measured.
"""

from dataclasses import dataclass

import torch

BUCKETS = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 7), (8, 15), (16, None))  # offsets back, inclusive
LIFT = 2.0  # a character is preferred when attention on it is at least this many times an even spread's …
SHARE = 0.2  # … and at least this share of the head's attention
TOP = 3  # characters listed as targets and sources


@dataclass
class Profile:
    """Where one head looks and at what, on validation text."""

    offsets: list[float]  # share of attention per bucket of BUCKETS
    targets: list[tuple[str, float, float]]  # (character, share, lift), by share, TOP of them
    sources: list[tuple[str, float]]  # (character, mean weight on the top target), TOP of them
    entropy: float  # nats

    def as_dict(self) -> dict:
        return {
            "offsets": dict(zip(map(bucket_name, BUCKETS), self.offsets, strict=True)),
            "targets": [list(t) for t in self.targets],
            "sources": [list(s) for s in self.sources],
            "entropy": self.entropy,
        }


def bucket_name(bucket: tuple[int, int | None]) -> str:
    low, high = bucket
    return f"{low}+" if high is None else str(low) if low == high else f"{low}-{high}"


def offset_shares(weights: torch.Tensor) -> torch.Tensor:
    """Each head's share of attention per bucket of BUCKETS: (N, nh, T, T) -> (nh, len(BUCKETS))."""
    T = weights.size(-1)
    back = torch.arange(T).view(T, 1) - torch.arange(T).view(1, T)  # (T, T): query i, key j -> i − j
    shares = []
    for low, high in BUCKETS:
        inside = (back >= low) & (back <= (T if high is None else high))  # (T, T)
        shares.append((weights * inside).sum(dim=-1).mean(dim=(0, 2)))  # (nh,)
    return torch.stack(shares, dim=1)


def character_shares(
    weights: torch.Tensor, ids: torch.Tensor, vocab: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's share of attention on each character, and an even spread's: (nh, V) and (V,).

    weights (N, nh, T, T) on ids (N, T).
    """
    N, nh, T, _ = weights.shape
    onehot = torch.nn.functional.one_hot(ids, vocab).float()  # (N, T, V): key j holds character c
    share = torch.einsum("nhij,njc->hc", weights, onehot) / (N * T)  # (nh, V)
    seen = onehot.cumsum(dim=1) / torch.arange(1, T + 1).view(1, T, 1)  # (N, T, V): keys ≤ i holding c
    return share, seen.mean(dim=(0, 1))


def source_weights(weights: torch.Tensor, ids: torch.Tensor, target: int, vocab: int) -> torch.Tensor:
    """Mean weight each query character gives keys holding `target`: (N, nh, T, T) -> (nh, V), NaN where a
    character never asks."""
    on_target = (weights * (ids == target).unsqueeze(1).unsqueeze(2)).sum(dim=-1)  # (N, nh, T)
    onehot = torch.nn.functional.one_hot(ids, vocab).float()  # (N, T, V): query i holds character c
    total = torch.einsum("nhi,nic->hc", on_target, onehot)  # (nh, V)
    return total / onehot.sum(dim=(0, 1))  # 0 / 0 = NaN where the character never asks


def profiles(weights: torch.Tensor, ids: torch.Tensor, chars: list[str]) -> list[Profile]:
    """Every head of one layer profiled: weights (N, nh, T, T) on ids (N, T) -> nh profiles."""
    V = len(chars)
    offsets = offset_shares(weights)  # (nh, buckets)
    share, even = character_shares(weights, ids, V)  # (nh, V), (V,)
    logs = torch.where(weights > 0, weights.clamp(min=1e-30).log(), torch.zeros_like(weights))
    heat = -(weights * logs).sum(dim=-1).mean(dim=(0, 2))  # (nh,)
    found = []
    for h in range(weights.size(1)):
        order = share[h].argsort(descending=True)[:TOP].tolist()
        targets = [
            (chars[c], round(float(share[h, c]), 4), round(float(share[h, c] / even[c]), 2)) for c in order
        ]
        asks = source_weights(weights[:, h : h + 1], ids, order[0], V)[0]  # (V,)
        asks = torch.nan_to_num(asks, nan=-1.0)
        sources = [(chars[c], round(float(asks[c]), 4)) for c in asks.argsort(descending=True)[:TOP].tolist()]
        found.append(Profile([round(float(x), 4) for x in offsets[h]], targets, sources, float(heat[h])))
    return found


def describe(profile: Profile, cost: float | None = None) -> str:
    """One line: where the head looks, at what, its entropy and (if measured) what switching it off costs."""
    words = [where(profile.offsets)]
    preferred = [t for t in profile.targets if t[2] >= LIFT and t[1] >= SHARE]
    if preferred:
        shown = ", ".join(f"{glyph(c)} {s:.0%} ({lift:.1f}× even)" for c, s, lift in preferred)
        asks = ", ".join(glyph(c) for c, w in profile.sources if w > 0)
        words.append(f"mostly at {shown}, most from {asks}")
    else:
        words.append("no character preferred")
    words.append(f"entropy {profile.entropy:.2f}")
    if cost is not None:
        words.append(f"off costs {cost:+.3f} nats")
    return "; ".join(words)


def where(offsets: list[float]) -> str:
    """The fewest offset buckets that hold at least half the attention, largest first, in words."""
    order = sorted(range(len(BUCKETS)), key=lambda b: -offsets[b])
    chosen, total = [], 0.0
    for b in order:
        chosen.append(b)
        total += offsets[b]
        if total >= 0.5:
            break
    parts = [f"{back(BUCKETS[b])} {offsets[b]:.0%}" for b in chosen]
    return "looks " + ", ".join(parts)


def back(bucket: tuple[int, int | None]) -> str:
    """An offset bucket in words: 'at itself', '1 back', '4-7 back'."""
    return "at itself" if bucket == (0, 0) else f"{bucket_name(bucket)} back"


def glyph(c: str) -> str:
    """A character as a description shows it: quoted, a space and a newline spelled out."""
    return {" ": "space", "\n": "newline"}.get(c, repr(c))
