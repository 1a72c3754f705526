"""What each attention head does: its role scores (tinygpt.explain.roles), entropy and importance.

Scored on validation windows (fixed, evenly spaced: by default POSITIONS positions' worth, at
most `WINDOWS` windows), and the induction role on probes (as many): random characters (no space,
no newline), then a random string written twice, its copy a different distance back in each (a
fixed seed). A head's entropy is the mean, over queries, of −Σ_j w_j·ln w_j (0: all on one
position; ln(i + 1): spread evenly). Its importance is how much the validation loss on the same
windows rises when that head alone is switched off (zero ablation, tinygpt.explain.ablate); the
induction loss, the loss on the probes' second copies, is given with each head off too. Every head
off is one batched pass per layer from the stream after that layer's attention, the head's share of it
taken out (tinygpt.explain.ablate.each_head_off).
Each head is also described in words (tinygpt.explain.describe): where it looks, at what,
and what switching it off costs.
"""

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from tinygpt.data.corpus import validation_windows, window_count, windows_for
from tinygpt.errors import UserError
from tinygpt.explain.ablate import OFF_POINTS, each_head_off
from tinygpt.explain.describe import LIFT, SHARE, describe, profiles
from tinygpt.explain.heads_cache import heads_key, keep, read_kept
from tinygpt.explain.roles import (
    ROLES,
    SHORT_NAMES,
    THRESHOLDS,
    Boundaries,
    induction_keys,
    label,
    probe_distances,
    scores_of,
)
from tinygpt.explain.validation import validation_split_of
from tinygpt.files.checkpoint import Checkpoint, read_checkpoint
from tinygpt.model import GPT

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
    importance_se: float | None  # its standard error over the windows (None from one window)
    induction_loss: float  # loss on the probes' second copies with this head off
    profile: dict  # where it looks and at what (tinygpt.explain.describe.Profile.as_dict)
    description: str  # the profile and the importance in one line of words

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def induction_probes(
    vocab_size: int, block_size: int, count: int = PROBES, avoid: list[int] | tuple = ()
) -> torch.Tensor:
    """Probes of 2·(block_size // 2) ids: random ids, then a random string of d ids written twice, the
    second copy last, d from probe_distances: (count, 2·(block_size // 2)). No probe holds an id of
    `avoid` (the spaces and newlines: a copy is a run of characters within a word or a line)."""
    T = 2 * (block_size // 2)
    generator = torch.Generator().manual_seed(PROBE_SEED)
    allowed = torch.tensor([i for i in range(vocab_size) if i not in avoid] or list(range(vocab_size)))
    probes = allowed[torch.randint(len(allowed), (count, T), generator=generator)]
    for row, d in zip(probes, probe_distances(count, T).tolist(), strict=True):
        row[T - d :] = row[T - 2 * d : T - d]  # the second copy
    return probes


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean over queries of each head's attention entropy in nats: (N, nh, T, T) -> (nh,)."""
    logs = torch.where(weights > 0, weights.clamp(min=1e-30).log(), torch.zeros_like(weights))
    return -(weights * logs).sum(dim=-1).mean(dim=(0, 2))


@torch.no_grad()
def losses(model: GPT, windows: torch.Tensor) -> torch.Tensor:
    """Next-character loss at every position of windows (N, T + 1): (N, T)."""
    model.eval()
    logits, _ = model(windows[:, :-1])
    targets = windows[:, 1:]
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none").view(
        targets.shape
    )


def loss(model: GPT, windows: torch.Tensor) -> float:
    """Mean next-character loss over windows (N, T + 1)."""
    return losses(model, windows).mean().item()


def induction_loss(model: GPT, probes: torch.Tensor) -> float:
    """Mean loss where a probe's next character is predictable from its first copy (queries that have
    an induction key): probes (N, T)."""
    N, T = probes.shape
    copies = induction_keys(N, T).any(dim=-1)[:, :-1]  # (N, T − 1): the queries loss() has targets for
    return losses(model, probes)[copies].mean().item()


REPEAT = 4  # characters that must recur, in order, for a position to repeat earlier text


def repeating(ids: torch.Tensor, k: int = REPEAT) -> torch.Tensor:
    """(N, T) bool: the k characters ending at position i occurred, in the same order, earlier in the
    window (ending before i). There the text is copying itself, and an induction head can say what
    comes next."""
    N, T = ids.shape
    out = torch.zeros(N, T, dtype=torch.bool)
    if T < k:
        return out
    grams = ids.unfold(1, k, 1)  # (N, G, k): the k-gram ending at position g + k − 1
    G = grams.size(1)
    same = (grams.unsqueeze(2) == grams.unsqueeze(1)).all(dim=-1)  # (N, G, G)
    earlier = torch.ones(G, G, dtype=torch.bool).tril(-1)  # gram h ends before gram g
    out[:, k - 1 :] = (same & earlier).any(dim=-1)
    return out


def repeat_loss(model: GPT, windows: torch.Tensor) -> float | None:
    """Mean loss at the positions of windows (N, T + 1) whose text repeats earlier text (`repeating`);
    None where none does."""
    where = repeating(windows[:, :-1])  # (N, T)
    if not where.any():
        return None
    return losses(model, windows)[where].mean().item()


@dataclass
class Heads:
    """Every head's report, and the losses with every head on that importance is measured from."""

    reports: list[HeadReport]
    loss: float  # validation loss on the scored windows
    induction_loss: float  # loss on the probes' second copies
    windows: int = 0  # validation windows scored (each block_size long)
    probes: int = 0  # induction probes scored

    def as_dict(self) -> dict:
        """Plain data (what explain.heads_cache keeps): every field, each report as a dict."""
        return {**vars(self), "reports": [r.as_dict() for r in self.reports]}

    @classmethod
    def from_dict(cls, data: dict) -> "Heads":
        """as_dict's data back; a TypeError or KeyError when it is not such data."""
        return cls(**{**data, "reports": [HeadReport(**r) for r in data["reports"]]})


def roles_of(
    text_weights: list[torch.Tensor],
    text: torch.Tensor,
    probe_weights: list[torch.Tensor],
    probes: torch.Tensor,
    ends: Boundaries,
) -> list[HeadRole]:
    """The roles from each layer's attention weights on text (N, T) and on the probes (P, 2·half)."""
    roles = []
    for layer, (tw, pw) in enumerate(zip(text_weights, probe_weights, strict=True)):
        scores = scores_of(tw, text, pw, probes, ends)
        heat = entropy(tw)
        for head in range(tw.size(1)):
            mine = {role: round(float(scores[role][head]), 6) for role in ROLES}
            roles.append(HeadRole(layer, head, mine, label(mine), float(heat[head])))
    return roles


POSITIONS = 1024  # positions scored by default: WINDOWS windows of 64 (configs/cpu.yaml's block), or
# fewer, longer ones. The standard error of an importance falls as one over the square root of the
# positions scored, about alike for any block size (docs/speed.md, "Scoring the heads"), and the cost
# rises with them: 1,024 keep the README's model scored as it always was.


def default_count(block_size: int, most: int = WINDOWS) -> int:
    """Windows (or probes) of about block_size scored by default: POSITIONS of them, at most `most`."""
    return windows_for(POSITIONS, block_size, most)


def probe_count(block_size: int) -> int:
    """Induction probes scored by default: POSITIONS positions of them, at most PROBES."""
    return default_count(2 * (block_size // 2), PROBES)


def scoring_probes(vocab_size: int, block_size: int, avoid: list[int] | tuple = ()) -> torch.Tensor:
    """The induction probes every head is scored on (induction_probes, probe_count of them), the same
    for the heads' report and the circuits' knockouts."""
    return induction_probes(vocab_size, block_size, probe_count(block_size), avoid)


@torch.no_grad()
def scored_pass(
    model: GPT, ids: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor], dict[str, torch.Tensor]]:
    """One pass over ids (N, T): the logits, each layer's attention weights (N, nh, T, T) and the
    activations each_head_off starts from (ablate.OFF_POINTS)."""
    model.eval()
    logits, found = model.run_with_cache(ids, names=["blocks.*.attn.pattern", *OFF_POINTS])
    weights = [found[f"blocks.{layer}.attn.pattern"].float() for layer in range(model.config.n_layer)]
    return logits, weights, found


def next_targets(ids: torch.Tensor) -> torch.Tensor:
    """The next character at each position of ids (N, T), ignored (-100) at the last: (N, T)."""
    return torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)


def position_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at each position: logits (N, T, vocab), targets (N, T) -> (N, T), 0 where ignored."""
    flat = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    return flat.view(targets.shape).cpu()


def head_reports(
    model: GPT, val_ids: torch.Tensor, ends: Boundaries, chars: list[str], windows: int | None = None
) -> Heads:
    """The report of every head of `model`, scored on val_ids (a validation split's ids) in `windows`
    windows (default: default_count); chars: the vocabulary, for the descriptions. Two passes (the
    windows, the probes) give every role and the losses with every head on; each_head_off the losses
    with each head off."""
    cfg = model.config
    windows = windows or default_count(cfg.block_size)
    text = validation_windows(val_ids, cfg.block_size, windows)  # (N, T + 1)
    inputs, targets = text[:, :-1], text[:, 1:]  # (N, T) each
    probes = scoring_probes(cfg.vocab_size, cfg.block_size, ends.any)  # (P, 2·half)
    logits, text_weights, text_found = scored_pass(model, inputs)
    probe_logits, probe_weights, probe_found = scored_pass(model, probes)
    copies = induction_keys(*probes.shape).any(dim=-1)  # (P, 2·half): queries with an induction key
    base = position_losses(logits, targets)  # (N, T)
    off = each_head_off(model, inputs, targets, text_found)  # (L, nh, N, T)
    probe_targets = next_targets(probes)
    base_induction = position_losses(probe_logits, probe_targets)[copies].mean().item()
    scored = probes.size(1) - int(copies.any(dim=0).nonzero().min())  # the last positions with a copy
    off_probes = each_head_off(model, probes, probe_targets, probe_found, last=scored)  # (L, nh, P, scored)
    off_induction = off_probes[..., copies[:, -scored:]].mean(dim=-1)
    cost = (off - base).mean(dim=-1)  # (L, nh, N): each window's loss increase
    spread = cost.std(dim=-1) / math.sqrt(cost.size(-1)) if cost.size(-1) > 1 else None
    found = [p for w in text_weights for p in profiles(w, inputs, chars)]
    reports = []
    for role, profile in zip(roles_of(text_weights, inputs, probe_weights, probes, ends), found, strict=True):
        at = (role.layer, role.head)
        importance = (off[at] - base).mean().item()
        reports.append(
            HeadReport(
                **vars(role),
                importance=importance,
                importance_se=None if spread is None else spread[at].item(),
                induction_loss=off_induction[at].item(),
                profile=profile.as_dict(),
                description=describe(profile, importance),
            )
        )
    return Heads(reports, base.mean().item(), base_induction, len(text), len(probes))


def checkpoint_heads(checkpoint: str | Path, windows: int | None = None) -> Heads:
    """Every head of a checkpoint, scored on the validation split of the corpus it was trained on:
    on `windows` windows of it (--windows), or by default on default_count's (or as many as it holds);
    kept beside it (kept_heads)."""
    saved = read_checkpoint(checkpoint)
    model = saved.build_model(checkpoint).eval()
    val, ends = scoring_text(saved, model, checkpoint, windows)
    return kept_heads(saved, model, checkpoint, val, ends, windows)


def kept_heads(
    saved: Checkpoint,
    model: GPT,
    checkpoint: str | Path,
    val: torch.Tensor,
    ends: Boundaries,
    windows: int | None = None,
) -> Heads:
    """head_reports of saved's model, read back from beside the checkpoint when they were scored before on
    the same weights, text and settings (explain.heads_cache), else scored and kept there. While hooks are
    attached to the model (heads switched off) they are scored afresh and not kept."""
    if model.hook_points.active:
        return head_reports(model, val, ends, saved.chars, windows)
    cfg = model.config
    windows = windows or default_count(cfg.block_size)
    probes = probe_count(cfg.block_size)
    key = heads_key(saved, model, validation_windows(val, cfg.block_size, windows), probes, PROBE_SEED)
    kept = read_kept(checkpoint, key)
    if kept is not None:
        try:
            return Heads.from_dict(kept)
        except (TypeError, KeyError):  # another layout: scored again
            pass
    heads = head_reports(model, val, ends, saved.chars, windows)
    keep(checkpoint, key, heads.as_dict())
    return heads


def scoring_text(
    saved: Checkpoint, model: GPT, checkpoint: str | Path, windows: int | None
) -> tuple[torch.Tensor, Boundaries]:
    """The validation ids heads are scored on, and the ids that end a word or a line, for a checkpoint;
    `windows` (if the user chose it) checked against what the split holds."""
    check_windows(None, model.config.block_size, windows)  # below 1: said before the corpus is read
    val = validation_split_of(saved, model.config.block_size, checkpoint)
    check_windows(val, model.config.block_size, windows)
    return val, Boundaries.of({c: i for i, c in enumerate(saved.chars)})


def check_windows(val: torch.Tensor | None, block_size: int, windows: int | None) -> None:
    """--windows (None: the default) is at least 1 and at most the windows the split val holds."""
    if windows is not None and windows < 1:
        default = default_count(block_size)
        raise UserError(f"--windows {windows} is below 1; use 1 or more (default {default} here)")
    if val is None:
        return
    held = window_count(val, block_size)
    if windows is not None and windows > held:
        raise UserError(
            f"--windows {windows:,} is more than the {held:,} windows of {block_size + 1} "
            f"characters the validation split holds; use at most {held}"
        )


def standard_error(heads: Heads) -> str:
    """', standard error at most ±x' over the heads' importances, or nothing from one window."""
    errors = [r.importance_se for r in heads.reports if r.importance_se is not None]
    return f"; its standard error at most ±{max(errors):.4f}" if errors else ""


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
        f"in nats, on {heads.windows} windows{standard_error(heads)}"
    )
    lines.append(
        f"ind. loss: loss on the induction probes' second copies with that head off "
        f"({heads.induction_loss:.4f} with every head on)"
    )
    lines.append("")
    lines += [f"{r.layer:>3}.{r.head:<1}  {r.description}" for r in heads.reports]
    lines.append(
        "each head in words: the fewest offsets holding half its attention; the characters it attends to "
        f"at least {SHARE:.0%} of the time and {LIFT:g}× as often as an even spread would, and the "
        "characters that attend to the first of them most; its entropy in nats; what switching it off costs"
    )
    return "\n".join(lines)
