"""What each attention head does: its role scores (tinygpt.explain.roles), entropy and importance.

Scored on validation windows (fixed, evenly spaced, `WINDOWS` by default), and the
induction role on probes of random characters written twice (a fixed seed). A head's
entropy is the mean, over queries, of −Σ_j w_j·ln w_j (0: all on one position;
ln(i + 1): spread evenly). Its importance is how much the validation loss on the same
windows rises when that head alone is switched off (zero ablation, tinygpt.ablate); the
induction loss, the loss on the probes' second copies, is given with each head off too.
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
from tinygpt.explain.roles import ROLES, SHORT_NAMES, THRESHOLDS, Boundaries, label, scores_of
from tinygpt.model import GPT, attention_weights

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


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean over queries of each head's attention entropy in nats: (N, nh, T, T) -> (nh,)."""
    logs = torch.where(weights > 0, weights.clamp(min=1e-30).log(), torch.zeros_like(weights))
    return -(weights * logs).sum(dim=-1).mean(dim=(0, 2))


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
        scores = scores_of(tw, text, pw, probes, ends)
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
