"""The roles a head can play, one record each, from which the tables, the timeline and the page are made.

Every score is a mean attention weight, so it lies in [0, 1]: the share of a query's
attention that goes where the role says. Scored on validation windows except `induction`,
scored on probes (tinygpt.explain.heads draws them): random characters, never a space or a
newline, then a random string of d characters written twice, d differing from probe to
probe (probe_distances: a quarter of half a block to half a block back), so a head that
copies from one fixed distance scores on few of them:

    previous    weight on position i − 1                               (queries i ≥ 1)
    self        weight on position i itself
    first       weight on position 0, an attention sink                (queries i ≥ 1)
    same_char   weight on earlier positions holding the character at i (queries that have one)
    word_start  weight on the most recent space or newline before i    (queries that have one)
    line_start  weight on the most recent newline before i             (queries that have one)
    induction   in the second copy, weight from the copy of character t to position t + 1 of
                the first copy, d − 1 back: the character that followed it last time

A head's label is the role with the highest score among those that clear their
thresholds, else "mixed". To add a role: one Role in TABLE (its name, the table's short
name, its threshold, the words the page shows, its score) and a test of its score.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

WORD_ENDS = (" ", "\n")  # what ends a word, for word_start
LINE_ENDS = ("\n",)  # what ends a line, for line_start
MIXED = "mixed"  # the label of a head no role's threshold is cleared by
MIXED_WORDS = "no single named role clears its threshold"


@dataclass(frozen=True)
class Boundaries:
    """The ids that end a word (word_start) and a line (line_start), of those a vocabulary has."""

    word: list[int]
    line: list[int]

    @property
    def any(self) -> list[int]:
        """Every id that ends a word or a line: what the induction probes leave out."""
        return sorted(set(self.word + self.line))

    @classmethod
    def of(cls, ids: dict[str, int]) -> "Boundaries":
        return cls([ids[c] for c in WORD_ENDS if c in ids], [ids[c] for c in LINE_ENDS if c in ids])


Score = Callable[
    [torch.Tensor, torch.Tensor, Boundaries], torch.Tensor
]  # weights (N, nh, T, T), ids (N, T) -> (nh,)


@dataclass(frozen=True)
class Role:
    name: str
    short: str  # its column in the terminal tables (6 characters at most)
    threshold: float  # a head whose score reaches this can be labelled with the role
    words: str  # what the page says such a head does
    score: Score
    on_probes: bool = False  # scored on the induction probes, not on validation text


def _previous(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> torch.Tensor:
    i = torch.arange(weights.size(-1))
    return weights[:, :, i[1:], i[1:] - 1].mean(dim=(0, 2))


def _self(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> torch.Tensor:
    i = torch.arange(weights.size(-1))
    return weights[:, :, i, i].mean(dim=(0, 2))


def _first(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> torch.Tensor:
    return weights[:, :, 1:, 0].mean(dim=(0, 2))


def _same_char(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> torch.Tensor:
    i = torch.arange(weights.size(-1))
    earlier = i.view(1, -1) < i.view(-1, 1)  # (T, T): key j before query i
    return _mean_where(weights, (ids.unsqueeze(2) == ids.unsqueeze(1)) & earlier)  # keys (N, T, T)


def _word_start(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> torch.Tensor:
    return _mean_where(weights, _latest_before(ids, ends.word))


def _line_start(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> torch.Tensor:
    return _mean_where(weights, _latest_before(ids, ends.line))


def _induction(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> torch.Tensor:
    return induction_scores(weights)


TABLE = (
    Role("previous", "prev", 0.5, "looks at the character just before", _previous),
    Role("self", "self", 0.5, "looks at its own position", _self),
    Role("first", "first", 0.5, "parks its attention on the first position (an attention sink)", _first),
    Role("same_char", "same", 0.4, "looks at earlier copies of the same character", _same_char),
    Role(
        "word_start",
        "word",
        0.4,
        "looks at the start of the current word (the last space or newline)",
        _word_start,
    ),
    Role("line_start", "line", 0.4, "looks at the start of the current line (the last newline)", _line_start),
    Role(
        "induction",
        "induct",
        0.4,
        "looks at what followed this character last time (induction)",
        _induction,
        on_probes=True,
    ),
)
ROLES = tuple(role.name for role in TABLE)
THRESHOLDS = {role.name: role.threshold for role in TABLE}
SHORT_NAMES = {role.name: role.short for role in TABLE}
WORDS = {**{role.name: role.words for role in TABLE}, MIXED: MIXED_WORDS}  # the page's hover text


def role_scores(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> dict[str, torch.Tensor]:
    """Each head's score for the text roles: weights (N, nh, T, T) on ids (N, T) -> {role: (nh,)}."""
    return {role.name: role.score(weights, ids, ends) for role in TABLE if not role.on_probes}


def scores_of(
    text_weights: torch.Tensor,
    text: torch.Tensor,
    probe_weights: torch.Tensor,
    probes: torch.Tensor,
    ends: Boundaries,
) -> dict[str, torch.Tensor]:
    """Each head's score for every role, in TABLE's order: the text roles on text, the others on probes."""
    return {
        role.name: role.score(probe_weights, probes, ends)
        if role.on_probes
        else role.score(text_weights, text, ends)
        for role in TABLE
    }


def _latest_before(ids: torch.Tensor, marks: list[int]) -> torch.Tensor:
    """(N, T, T): key j is the latest position before query i holding one of `marks`."""
    N, T = ids.shape
    i = torch.arange(T)
    position = torch.where(torch.isin(ids, torch.tensor(marks, dtype=ids.dtype)), i, -1)  # (N, T)
    latest = torch.cummax(position, dim=1).values  # (N, T): the latest mark at or before i
    before = torch.cat([torch.full((N, 1), -1, dtype=latest.dtype), latest[:, :-1]], dim=1)  # before i
    return F.one_hot(before.clamp(min=0), T).bool() & (before >= 0).unsqueeze(-1)


def _mean_where(weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Mean over queries that have at least one such key of the weight they give those keys: (nh,)."""
    has = keys.any(dim=-1)  # (N, T)
    share = (weights * keys.unsqueeze(1)).sum(dim=-1)  # (N, nh, T)
    count = has.sum()
    if count == 0:
        return torch.zeros(weights.size(1))
    return (share * has.unsqueeze(1)).sum(dim=(0, 2)) / count


def probe_distances(count: int, length: int) -> torch.Tensor:
    """How far back each probe's first copy is: evenly from length // 8 (at least 2) to length // 2."""
    return torch.linspace(max(2, length // 8), length // 2, count).round().long()  # (count,)


def induction_keys(count: int, length: int) -> torch.Tensor:
    """(count, T, T): from each second-copy position i but the last, the key i − d + 1 an induction head
    attends to (the character after the first copy's twin), d the probe's distance."""
    keys = torch.zeros(count, length, length, dtype=torch.bool)
    for row, d in enumerate(probe_distances(count, length).tolist()):
        i = torch.arange(length - d, length - 1)
        keys[row, i, i - d + 1] = True
    return keys


def induction_scores(weights: torch.Tensor) -> torch.Tensor:
    """Weight on the induction keys of the probes (induction_keys): (N, nh, T, T) -> (nh,)."""
    N, _, T, _ = weights.shape
    return _mean_where(weights, induction_keys(N, T))


def label(scores: dict[str, float]) -> str:
    """The role with the highest score of those that clear their thresholds, else "mixed"."""
    cleared = {role: s for role, s in scores.items() if s >= THRESHOLDS[role]}
    return max(cleared, key=cleared.get) if cleared else MIXED
