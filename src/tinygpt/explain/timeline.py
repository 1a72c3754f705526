"""The timeline of a run: at every evaluation, what each head does and what the model predicts.

Training appends one snapshot to `timeline.jsonl` in the run directory at every
evaluation, through the `TimelineRecorder` it is handed as a listener (rank 0 only;
`train.timeline: false` turns it off); tinygpt.files.snapshots has the file's format.

`from_checkpoints` writes the same snapshots from a run's saved checkpoints, for a run
that recorded none; `timeline_table` is what `tinygpt inspect RUN_DIR --timeline` prints.
"""

import json
import math
from pathlib import Path
from typing import Any

import torch

from tinygpt.config.run_config import RunConfig
from tinygpt.data.corpus import Corpus, validation_windows
from tinygpt.errors import UserError
from tinygpt.explain.glyphs import escaped, glyph
from tinygpt.explain.heads import REPEAT, induction_probes, repeat_loss
from tinygpt.explain.roles import ROLES, SHORT_NAMES, THRESHOLDS, Boundaries, label, scores_of
from tinygpt.explain.validation import validation_split_of
from tinygpt.files.atomic import write_atomic
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.metrics import read_metrics
from tinygpt.files.snapshots import FILE_NAME, append_snapshot, probe_of, read_timeline
from tinygpt.generation.sampling import generate
from tinygpt.model import GPT, attention_weights
from tinygpt.tokenizer import EMPTY_PROMPT_START, CharTokenizer

SCORED_WINDOWS = 4  # validation windows the head scores are measured on
SCORED_PROBES = 4  # induction probes (random strings written twice)
REPEAT_WINDOWS = 16  # validation windows the loss where the text repeats itself is measured on
SAMPLE_LENGTH = 200
SAMPLE_TEMPERATURE = 0.8
SAMPLE_SEED = 0
TOP = 5  # next-character predictions kept per probe position
DECIMALS = 4


class Recorder:
    """Takes snapshots of one model as it trains, always on the same probe, windows and sample seed."""

    def __init__(self, tokenizer: CharTokenizer, val_ids: torch.Tensor, block_size: int, probe: str = ""):
        self.tokenizer = tokenizer
        self.probe_ids = probe_of(tokenizer, val_ids, block_size, probe)  # (P,)
        self.windows = validation_windows(val_ids, block_size, SCORED_WINDOWS)[:, :-1]  # (N, T)
        self.repeats = validation_windows(val_ids, block_size, REPEAT_WINDOWS)  # (R, T + 1)
        self.ends = Boundaries.of(tokenizer.ids)
        self.probes = induction_probes(tokenizer.vocab_size, block_size, SCORED_PROBES, self.ends.any)
        start = tokenizer.ids.get(EMPTY_PROMPT_START, int(self.probe_ids[0]))
        self.sample_start = torch.tensor([[start]])  # (1, 1)

    @torch.no_grad()
    def snapshot(self, model: GPT, step: int, train_loss: float, val_loss: float) -> dict[str, Any]:
        """The snapshot of `model` at `step`; the model is left in the mode it was in."""
        was_training = model.training
        try:
            attention, top5 = self._probe(model)
            return {
                "step": step,
                "train_loss": train_loss,
                "val_loss": val_loss,
                "repeat_loss": self._repeat_loss(model),
                "probe": self.tokenizer.decode(self.probe_ids.tolist()),
                "heads": self._heads(model),
                "attention": attention,
                "top5": top5,
                "sample": self._sample(model),
            }
        finally:
            model.train(was_training)

    def _repeat_loss(self, model: GPT) -> float | None:
        found = repeat_loss(model, self.repeats.to(model.wte.weight.device))
        return None if found is None else round(found, DECIMALS)

    def _heads(self, model: GPT) -> list[dict[str, Any]]:
        device = model.wte.weight.device
        text_weights = attention_weights(model, self.windows.to(device))
        probe_weights = attention_weights(model, self.probes.to(device))
        heads = []
        for layer, (tw, pw) in enumerate(zip(text_weights, probe_weights, strict=True)):
            scores = scores_of(tw.cpu(), self.windows, pw.cpu(), self.probes, self.ends)
            for head in range(model.config.n_head):
                mine = {role: round(float(scores[role][head]), DECIMALS) for role in ROLES}
                heads.append({"layer": layer, "head": head, "scores": mine, "label": label(mine)})
        return heads

    def _probe(self, model: GPT) -> tuple[list, list]:
        """Every head's attention rows on the probe, and the top-5 next characters at each position."""
        model.eval()
        ids = self.probe_ids.to(model.wte.weight.device).view(1, -1)  # (1, P)
        logits, found = model.run_with_cache(ids, names=["blocks.*.attn.pattern"])  # logits (1, P, vocab)
        attention = []
        for layer in range(model.config.n_layer):
            pattern = found[f"blocks.{layer}.attn.pattern"][0]  # (nh, P, P)
            weights = torch.round(pattern.double().cpu(), decimals=DECIMALS)
            attention.append([[row[: i + 1] for i, row in enumerate(head.tolist())] for head in weights])
        probs = torch.softmax(logits[0].float(), dim=-1).cpu()  # (P, vocab)
        best = torch.topk(probs, min(TOP, probs.size(-1)), dim=-1)
        top5 = [
            [[self.tokenizer.chars[i], round(p, DECIMALS)] for i, p in zip(ids_, ps, strict=True)]
            for ids_, ps in zip(best.indices.tolist(), best.values.double().tolist(), strict=True)
        ]
        return attention, top5

    def _sample(self, model: GPT) -> str:
        device = model.wte.weight.device
        generator = torch.Generator(device=device).manual_seed(SAMPLE_SEED)
        start = self.sample_start.to(device)
        ids = generate(model, start, SAMPLE_LENGTH, temperature=SAMPLE_TEMPERATURE, generator=generator)
        return self.tokenizer.decode(ids[0, 1:].tolist())


class TimelineRecorder:
    """Training's listener that appends a snapshot to the run's timeline.jsonl at every evaluation."""

    def __init__(self, probe: str = ""):
        self.probe = probe
        self.recorder: Recorder | None = None
        self.path: Path | None = None

    def start(self, corpus: Corpus, block_size: int, run_dir: Path) -> None:
        self.recorder = Recorder(corpus.tokenizer, corpus.val, block_size, self.probe)  # checks the probe
        self.path = run_dir / FILE_NAME

    def evaluated(self, step: int, losses: dict[str, float], model: GPT) -> None:
        append_snapshot(self.path, self.recorder.snapshot(model, step, losses["train"], losses["val"]))


def listeners_for(config: RunConfig) -> list[TimelineRecorder]:
    """What `tinygpt train` hands the training loop: the timeline's recorder, unless train.timeline is off."""
    return [TimelineRecorder(config.train.timeline_probe)] if config.train.timeline else []


def from_checkpoints(run_dir: str | Path) -> list[dict[str, Any]]:
    """Write timeline.jsonl for a run that recorded none, one snapshot per saved step; returns them.

    Every *.pt in the run directory counts (best.pt, last.pt and any others), one per step.
    The losses are metrics.jsonl's at that step, else the checkpoint's record's.
    """
    run_dir = Path(run_dir)
    path = run_dir / FILE_NAME
    if read_timeline(path):
        raise UserError(
            f"{path} already holds a timeline; --from-checkpoints writes one for a run that recorded "
            "none (delete the file to write it again)"
        )
    found = {}  # step -> (its file, the checkpoint)
    for file in sorted(run_dir.glob("*.pt")):
        saved = read_checkpoint(file)
        found.setdefault(saved.record["step"], (file, saved))
    if not found:
        raise UserError(f"{run_dir} holds no checkpoints (*.pt); train a run there first")
    logged = {entry["step"]: entry for entry in read_metrics(run_dir / "metrics.jsonl")}
    snapshots = []
    for step, (file, saved) in sorted(found.items()):
        model = saved.build_model(file).eval()
        block_size = model.config.block_size
        probe = (saved.run_section("train") or {}).get("timeline_probe", "")
        recorder = Recorder(saved.tokenizer, validation_split_of(saved, block_size, file), block_size, probe)
        losses = logged.get(step, saved.record)
        snapshots.append(recorder.snapshot(model, step, losses["train_loss"], losses["val_loss"]))
    try:
        write_atomic(path, "".join(json.dumps(s) + "\n" for s in snapshots))
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror}; free some space or fix permissions") from None
    return snapshots


# ---------------------------------------------------------------- in the terminal


def dominant(scores: dict[str, float]) -> tuple[str, float, bool]:
    """A head's role at one snapshot: its label and score if one clears its threshold, else its best score."""
    named = label(scores)
    role = named if named != "mixed" else max(scores, key=scores.get)
    return role, scores[role], named != "mixed"


def roles_of(snapshots: list[dict[str, Any]]) -> list[str]:
    """The roles a timeline scored: a timeline recorded before a role existed lacks it."""
    scored = snapshots[0]["heads"][0]["scores"]
    return [role for role in ROLES if role in scored]


def first_cleared(snapshots: list[dict[str, Any]]) -> dict[str, list[tuple[int, int, int]]]:
    """For each role, (step, layer, head) where each head first cleared that role's threshold, by step."""
    found: dict[str, dict[tuple[int, int], int]] = {role: {} for role in roles_of(snapshots)}
    for snapshot in snapshots:
        for h in snapshot["heads"]:
            for role, score in h["scores"].items():
                if score >= THRESHOLDS[role]:
                    found[role].setdefault((h["layer"], h["head"]), snapshot["step"])
    return {role: sorted((step, *head) for head, step in heads.items()) for role, heads in found.items()}


def timeline_table(snapshots: list[dict[str, Any]]) -> str:
    """One row per snapshot: the losses, then each head's dominant role and score; then when roles formed."""
    heads = [(h["layer"], h["head"]) for h in snapshots[0]["heads"]]
    repeats = "repeat_loss" in snapshots[0]  # a timeline recorded before it was measured lacks it
    header = f"{'step':>7} {'train':>6} {'val':>6} " + (f"{'repeat':>6} " if repeats else "")
    lines = [header + " " + " ".join(f"{f'{L}.{H}':<12}" for L, H in heads)]
    for s in snapshots:
        cells = []
        for h in s["heads"]:
            role, score, cleared = dominant(h["scores"])
            cells.append(f"{SHORT_NAMES[role] + ('*' if cleared else ''):<7}{shown_down(score)}".ljust(12))
        losses = f"{s['step']:>7} {s['train_loss']:>6.3f} {s['val_loss']:>6.3f} "
        losses += f"{_loss(s['repeat_loss']):>6} " if repeats else ""
        lines.append(losses + " " + " ".join(cells))
    if repeats:
        lines.append(
            f"repeat: the validation loss where the text repeats its own last {REPEAT} characters from "
            "earlier in the window, which an induction head lowers (- where no window repeats)"
        )
    lines.append(
        "each head: the role it scores highest on (* where that clears its threshold, its label); scores "
        "rounded down, so one shown at its threshold has reached it"
    )
    lines.append("")
    lines.append("first cleared its threshold:")
    for role, firsts in first_cleared(snapshots).items():
        where = ", ".join(f"head {L}.{H} at step {step}" for step, L, H in firsts) or "by no head"
        lines.append(f"  {role:<11}(≥ {THRESHOLDS[role]}) {where}")
    shown = "".join(glyph(c) if c == "\n" else escaped(c) for c in snapshots[-1]["probe"])  # ↵, as elsewhere
    lines.append(f"probe: {shown}")
    return "\n".join(lines)


def shown_down(score: float) -> str:
    """A score to two decimals, rounded down: 0.4996 is 0.49, not 0.50, so a score shown at a threshold
    (0.50 beside "≥ 0.5") has cleared it, as the rule, which compares the score itself, says."""
    hundredths = math.floor(round(score * 100, 6))  # round first: 0.29 * 100 is 28.999999999999996
    return f"{hundredths / 100:.2f}"


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def timeline_of(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's snapshots, or a UserError that says how to get some."""
    path = Path(run_dir) / FILE_NAME
    snapshots = read_timeline(path)
    if not snapshots:
        raise UserError(
            f"{run_dir} has no timeline ({FILE_NAME}): it was trained with train.timeline off or before "
            "timelines were recorded; add --from-checkpoints to write one from its checkpoints"
        )
    return snapshots


def page_timeline(run_dir: Path) -> dict[str, Any] | None:
    """What the page's timeline reads: the snapshots, the roles and their thresholds; None if absent."""
    snapshots = read_timeline(Path(run_dir) / FILE_NAME)
    if not snapshots:
        return None
    return {"snapshots": snapshots, "roles": roles_of(snapshots), "thresholds": THRESHOLDS}


def run_directory(given: str | Path) -> Path:
    """The run directory a command names: the directory itself, or the one holding a named checkpoint."""
    path = Path(given)
    if path.is_file() and path.suffix != ".pt":
        raise UserError(
            f"{path} is neither a run directory nor a checkpoint (.pt); give a run directory "
            "(e.g. checkpoints/cpu) or a checkpoint in one"
        )
    if path.is_file():
        return path.parent
    if not path.is_dir():
        raise UserError(
            f"{path} does not exist; give a run directory (e.g. checkpoints/cpu) or a checkpoint in one"
        )
    return path
