"""What each attention head does: named roles scored from the model's own attention weights.

Every score is a mean attention weight, so it lies in [0, 1]: the share of a query's
attention that goes where the role says. Scored on validation windows (fixed,
evenly spaced, `WINDOWS` by default) except `induction`, scored on probes of random
characters written twice (a fixed seed):

    previous    weight on position i − 1                               (queries i ≥ 1)
    self        weight on position i itself
    first       weight on position 0, an attention sink                (queries i ≥ 1)
    same_char   weight on earlier positions holding the character at i (queries that have one)
    word_start  weight on the most recent space or newline before i    (queries that have one)
    line_start  weight on the most recent newline before i             (queries that have one)
    induction   in the second copy, weight from the copy of character t to position t + 1 of
                the first copy: the character that followed it last time

A head's label is the role with the highest score among those that clear their
THRESHOLDS, else "mixed". Its entropy is the mean, over queries, of −Σ_j w_j·ln w_j
(0: all on one position; ln(i + 1): spread evenly). Its importance is how much the
validation loss on the same windows rises when that head alone is switched off
(zero ablation, tinygpt.explain.ablate); the induction loss, the loss on the probes'
second copies, is given with each head off too.
"""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from tinygpt.ablate import ablated
from tinygpt.checkpoint import Checkpoint, read_checkpoint
from tinygpt.data import validation_split_of, validation_windows
from tinygpt.errors import UserError
from tinygpt.model import GPT, attention_weights

ROLES = ("previous", "self", "first", "same_char", "word_start", "line_start", "induction")
THRESHOLDS = {
    "previous": 0.5,
    "self": 0.5,
    "first": 0.5,
    "same_char": 0.4,
    "word_start": 0.4,
    "line_start": 0.4,
    "induction": 0.4,
}
WORD_ENDS = (" ", "\n")  # what ends a word, for word_start
LINE_ENDS = ("\n",)  # what ends a line, for line_start
SHORT_NAMES = {  # the roles' names as table columns
    "previous": "prev",
    "self": "self",
    "first": "first",
    "same_char": "same",
    "word_start": "word",
    "line_start": "line",
    "induction": "induct",
}
WINDOWS = 16  # validation windows scored, each block_size long
PROBES = 16  # random strings written twice, for induction
PROBE_SEED = 0


@dataclass
class HeadRole:
    """What one head does, from its attention weights alone (no ablation)."""

    layer: int
    head: int
    scores: dict[str, float]  # role -> mean attention weight where the role says
    label: str  # the best role that clears its threshold, or "mixed"
    entropy: float  # nats


@dataclass
class HeadReport(HeadRole):
    """A head's role, and what switching it off costs."""

    importance: float  # validation loss with this head off, minus the loss with every head on
    induction_loss: float  # loss on the probes' second copies with this head off

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def induction_probes(vocab_size: int, block_size: int, count: int = PROBES) -> torch.Tensor:
    """Random strings of block_size // 2 ids, each written twice: (count, 2·(block_size // 2))."""
    half = block_size // 2
    generator = torch.Generator().manual_seed(PROBE_SEED)
    first = torch.randint(vocab_size, (count, half), generator=generator)
    return torch.cat([first, first], dim=1)


@dataclass(frozen=True)
class Boundaries:
    """The ids that end a word (word_start) and a line (line_start), of those a vocabulary has."""

    word: list[int]
    line: list[int]

    @classmethod
    def of(cls, ids: dict[str, int]) -> "Boundaries":
        return cls([ids[c] for c in WORD_ENDS if c in ids], [ids[c] for c in LINE_ENDS if c in ids])


def role_scores(weights: torch.Tensor, ids: torch.Tensor, ends: Boundaries) -> dict[str, torch.Tensor]:
    """Each head's score for the text roles: weights (N, nh, T, T) on ids (N, T) -> {role: (nh,)}."""
    N, nh, T, _ = weights.shape
    i = torch.arange(T)
    scores = {
        "previous": weights[:, :, i[1:], i[1:] - 1].mean(dim=(0, 2)),
        "self": weights[:, :, i, i].mean(dim=(0, 2)),
        "first": weights[:, :, 1:, 0].mean(dim=(0, 2)),
    }
    earlier = i.view(1, T) < i.view(T, 1)  # (T, T): key j before query i
    same = (ids.unsqueeze(2) == ids.unsqueeze(1)) & earlier  # (N, T, T)
    scores["same_char"] = _mean_where(weights, same)
    scores["word_start"] = _mean_where(weights, _latest_before(ids, ends.word))
    scores["line_start"] = _mean_where(weights, _latest_before(ids, ends.line))
    return scores


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


def induction_scores(weights: torch.Tensor) -> torch.Tensor:
    """Weight from second-copy position half + t to first-copy position t + 1: (N, nh, 2h, 2h) -> (nh,)."""
    half = weights.size(-1) // 2
    t = torch.arange(half - 1)
    return weights[:, :, half + t, t + 1].mean(dim=(0, 2))


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean over queries of each head's attention entropy in nats: (N, nh, T, T) -> (nh,)."""
    logs = torch.where(weights > 0, weights.clamp(min=1e-30).log(), torch.zeros_like(weights))
    return -(weights * logs).sum(dim=-1).mean(dim=(0, 2))


def label(scores: dict[str, float]) -> str:
    cleared = {role: s for role, s in scores.items() if s >= THRESHOLDS[role]}
    return max(cleared, key=cleared.get) if cleared else "mixed"


@torch.no_grad()
def loss(model: GPT, windows: torch.Tensor, from_position: int = 0) -> float:
    """Mean next-character loss over windows (N, T + 1), counting targets from `from_position` on."""
    model.eval()
    logits, _ = model(windows[:, :-1])
    targets = windows[:, 1:]
    per = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none").view(
        targets.shape
    )
    return per[:, from_position:].mean().item()


@dataclass
class Heads:
    """Every head's report, and the losses with every head on that importance is measured from."""

    reports: list[HeadReport]
    loss: float  # validation loss on the scored windows
    induction_loss: float  # loss on the probes' second copies


def head_roles(model: GPT, text: torch.Tensor, probes: torch.Tensor, ends: Boundaries) -> list[HeadRole]:
    """Every head's role scores, label and entropy: text (N, T) validation inputs, probes (P, 2·half)."""
    roles = []
    text_weights = attention_weights(model, text)
    probe_weights = attention_weights(model, probes)
    for layer, (tw, pw) in enumerate(zip(text_weights, probe_weights, strict=True)):
        scores = role_scores(tw, text, ends)
        scores["induction"] = induction_scores(pw)
        heat = entropy(tw)
        for head in range(model.config.n_head):
            mine = {role: round(float(scores[role][head]), 6) for role in ROLES}
            roles.append(HeadRole(layer, head, mine, label(mine), float(heat[head])))
    return roles


def head_reports(model: GPT, val_ids: torch.Tensor, ends: Boundaries, windows: int = WINDOWS) -> Heads:
    """The report of every head of `model`, scored on val_ids (a validation split's ids)."""
    cfg = model.config
    text = validation_windows(val_ids, cfg.block_size, windows)  # (N, T + 1)
    probes = induction_probes(cfg.vocab_size, cfg.block_size)  # (P, 2·half)
    half = probes.size(1) // 2  # targets from index half on predict the second copy's 2nd character on
    base_loss = loss(model, text)
    base_induction = loss(model, probes, from_position=half)
    reports = []
    for role in head_roles(model, text[:, :-1], probes, ends):
        with ablated(model, [(role.layer, role.head)]):
            off_loss = loss(model, text)
            off_induction = loss(model, probes, from_position=half)
        reports.append(
            HeadReport(**vars(role), importance=off_loss - base_loss, induction_loss=off_induction)
        )
    return Heads(reports, base_loss, base_induction)


def checkpoint_heads(checkpoint: str | Path, windows: int = WINDOWS) -> Heads:
    """Every head of a checkpoint, scored on the validation split of the corpus it was trained on."""
    saved = read_checkpoint(checkpoint)
    model = saved.build_model(checkpoint).eval()
    val, ends = scoring_text(saved, model, checkpoint, windows)
    return head_reports(model, val, ends, windows)


def scoring_text(
    saved: Checkpoint, model: GPT, checkpoint: str | Path, windows: int
) -> tuple[torch.Tensor, Boundaries]:
    """The validation ids heads are scored on, and the ids that end a word or a line, for a checkpoint."""
    if windows < 1:
        raise UserError(f"--windows {windows} is below 1; use 1 or more (default {WINDOWS})")
    chars = saved.chars
    val = validation_split_of(saved, model.config.block_size, checkpoint)
    return val, Boundaries.of({c: i for i, c in enumerate(chars)})


def page_roles(
    saved: Checkpoint, model: GPT, checkpoint: str | Path, windows: int = WINDOWS
) -> list[HeadRole]:
    """The roles the explainer page labels its heatmaps with (scores only: no ablation losses)."""
    val, ends = scoring_text(saved, model, checkpoint, windows)
    cfg = model.config
    text = validation_windows(val, cfg.block_size, windows)[:, :-1]  # (N, T)
    return head_roles(model, text, induction_probes(cfg.vocab_size, cfg.block_size), ends)


def heads_json(heads: Heads) -> str:
    """`inspect --heads --json`: one object per head: layer, head, scores, label, entropy, importance…"""
    return json.dumps([r.as_dict() for r in heads.reports], indent=2)


def heads_table(heads: Heads) -> str:
    """The reports as a terminal table, one row per head."""
    names = SHORT_NAMES
    header = f"{'head':>5}  " + "  ".join(f"{names[r]:>6}" for r in ROLES)
    header += f"  {'label':<10} {'entropy':>7} {'importance':>10} {'ind. loss':>9}"
    lines = [header]
    for r in heads.reports:
        cells = "  ".join(f"{r.scores[role]:>6.3f}" for role in ROLES)
        lines.append(
            f"{r.layer:>3}.{r.head:<1}  {cells}  {r.label:<10} {r.entropy:>7.3f} {r.importance:>+10.4f} "
            f"{r.induction_loss:>9.4f}"
        )
    thresholds = ", ".join(f"{names[r]} {THRESHOLDS[r]}" for r in ROLES)
    lines.append(f"label: the best role at or above its threshold ({thresholds}), else mixed")
    lines.append(
        f"importance: validation loss with that head off (zero) minus with every head on ({heads.loss:.4f}), "
        "in nats"
    )
    lines.append(
        f"ind. loss: loss on the induction probes' second copies with that head off "
        f"({heads.induction_loss:.4f} with every head on)"
    )
    return "\n".join(lines)
