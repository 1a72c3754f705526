"""Resuming a run, all of it here: where it goes on from, what must match, and what comes back.

`tinygpt train --resume` (or a run directory's own config.yaml with --resume) continues the run in
out_dir from last.pt: its weights, optimizer state, random states and record (the step, tokens seen,
best loss, wall time), so the resumed run draws the batches and reaches the losses the unbroken run
would (tests/end_to_end/test_fault_injection.py). Before anything is built, the checkpoint must be of this
config's model and of the same text, split the same way; anything else is one line naming the file.
Where a run left no last.pt (it was removed), best.pt's weights go on, with the optimizer and the
batches started afresh. The directory's side (which file, the lock, rewinding metrics.jsonl past the
saved step) is `RunDirectory`'s (run_dir.py).
"""

import dataclasses
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from tinygpt.config.run_config import RunConfig
from tinygpt.data.corpus import Corpus
from tinygpt.errors import UserError, shown
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.files.metrics import read_metrics
from tinygpt.model import GPT, GPTConfig
from tinygpt.training.distributed import Ranks
from tinygpt.training.run_dir import RunDirectory

OTHER_TEXT = (
    "resume with the text the run trained on, or train a new run on this one with "
    "--set out_dir=checkpoints/<new name>"
)
RESUME_ADVICE = (  # best.pt: what --resume goes on from where there is no last.pt (run_dir.resume_point)
    "--resume needs it: put back a good copy, or move it away to resume from best.pt's weights, "
    "or start afresh with another out_dir"
)


@dataclass
class Progress:
    """Where the run stands: the part of the training record that --resume restores."""

    step: int = 0
    tokens_seen: int = 0
    best_val_loss: float = float("inf")
    best_step: int | None = None
    wall_time_s: float = 0.0
    train_loss: float | None = None
    val_loss: float | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any], path: Path) -> "Progress":
        """Where the run in `path` stood; a record that lacks a field (or holds the wrong kind of value)
        is a UserError naming the file."""
        fields = dataclasses.fields(cls)
        missing = [f.name for f in fields if f.name not in record]
        wrong = [f.name for f in fields if f.name in record and not _fits(record[f.name], f.default)]
        if missing or wrong:
            what = f"lacks {', '.join(missing)}" if missing else f"has a wrong {', '.join(wrong)}"
            raise UserError(f"--resume: the training record in {path} {what}; {RESUME_ADVICE}")
        return cls(**{f.name: record[f.name] for f in fields})


def _fits(value: Any, default: Any) -> bool:
    """A record's value is of its field's kind: counts whole numbers ≥ 0, the rest numbers, and
    None where the field starts unset (no evaluation yet)."""
    if isinstance(value, bool):
        return False
    if isinstance(default, int):
        return isinstance(value, int) and value >= 0
    return isinstance(value, (int, float)) or (default is None and value is None)


class Resumable(Protocol):
    """What resuming restores into: a training process's set-up (training/set_up.py's Setup)."""

    config: RunConfig
    ranks: Ranks
    optimizer: torch.optim.Optimizer

    def set_rng_state(self, state: dict[str, torch.Tensor]) -> None: ...


def resumed_model(
    saved: Checkpoint, path: Path, corpus: Corpus, config: RunConfig, model_config: GPTConfig, ranks: Ranks
) -> GPT:
    """The saved weights, once the corpus is the text they learned and the config's model is theirs."""
    _check_same_text(saved, corpus, config, path, ranks)  # first: another text, another model
    _check_same_model(saved, model_config, path)
    return saved.build_model(path)


def where_it_starts(
    saved: Checkpoint | None, path: Path | None, setup: Resumable, run: RunDirectory
) -> tuple[Progress, bool]:
    """Step 0, or the step last.pt holds with its state restored (best.pt's, where there is no last.pt,
    with its weights only); and whether that step was evaluated."""
    if saved is None:
        return Progress(), False
    state = Progress.from_record(saved.record, path)
    if path == run.last:
        restore(setup, saved, run.last)
    elif setup.ranks.is_main:
        run.say_resuming_from_best(state.step)
    if setup.ranks.is_main:
        run.rewind_metrics(state.step)
    # a run stopped during an evaluation saved last.pt without it: the resumed run evaluates that step first
    evaluated = any(e["step"] == state.step for e in read_metrics(run.metrics))
    max_iters = setup.config.train.max_iters
    if state.step > max_iters:
        raise UserError(
            f"--resume: {path} is at step {state.step}, past train.max_iters = {max_iters}; "
            f"set train.max_iters above {state.step} to train on"
        )
    return state, evaluated


def restore(setup: Resumable, saved: Checkpoint, path: Path) -> None:
    """The optimizer and this rank's random states from a last.pt (weights are set up from it).

    A last.pt whose states are missing or do not fit this model (a best.pt copied over it,
    a file edited by hand) is a UserError naming it; nothing of it is half-applied to training.
    """
    try:
        _restore_optimizer(setup.optimizer, setup.config.train.optimizer, saved)
        _check_optimizer_state(setup.optimizer)
        by_rank = _needed(saved.rng, "rng")
        if setup.ranks.rank >= len(by_rank):  # a rank the saved run did not have starts its own stream
            return
        setup.set_rng_state(by_rank[setup.ranks.rank])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as e:
        what = f"no {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
        raise UserError(
            f"--resume: {path} holds optimizer or random-generator state that this run cannot "
            f"take up ({what}); {RESUME_ADVICE}"
        ) from None


def _restore_optimizer(optimizer: torch.optim.Optimizer, named: str, saved: Checkpoint) -> None:
    was = (saved.run_section("train") or {}).get("optimizer", "adamw")
    now = named
    if was != now:
        raise UserError(
            f"--resume: the run trained with train.optimizer {was}, the config says {now}; "
            f"resume with the run's own config.yaml (or --set train.optimizer={was})"
        )
    optimizer.load_state_dict(_needed(saved.optimizer, "optimizer"))


def _check_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Every moment estimate has its parameter's shape: load_state_dict does not check, and a
    mismatch would only fail inside the first step."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            for name, value in optimizer.state.get(p, {}).items():
                if torch.is_tensor(value) and value.dim() and value.shape != p.shape:
                    shapes = f"{tuple(value.shape)} for a parameter of {tuple(p.shape)}"
                    raise ValueError(f"its {name} is {shapes}")


def _needed(state: Any, name: str) -> Any:
    """A last.pt's optimizer or random states, which a best.pt (or a file edited by hand) lacks."""
    if state is None:
        raise KeyError(name)  # said as "no 'name'" by restore
    return state


def _check_same_text(saved: Checkpoint, corpus: Corpus, config: RunConfig, path: Path, ranks: Ranks) -> None:
    """The corpus is the text the run trained on: its vocabulary, then its digest (ids as split). Another
    text (one that gained, lost or swapped characters, or was edited; or split by another val_fraction)
    would be trained on under the first one's ids, and its losses compared with the first one's best."""
    now, trained_on = corpus.tokenizer.chars, saved.chars
    if now != trained_on:
        new, gone = [c for c in now if c not in trained_on], [c for c in trained_on if c not in now]
        change = "; ".join(
            f"{what} {', '.join(repr(c) for c in chars[:5])}{' …' if len(chars) > 5 else ''}"
            for what, chars in (("new", new), ("gone", gone))
            if chars
        )
        raise UserError(
            f"--resume: the corpus {corpus.path} changed since {path} was trained on it: its vocabulary "
            f"went from {len(trained_on)} to {len(now)} characters ({change}); {OTHER_TEXT}"
        )
    if saved.corpus_digest is None:  # saved before checkpoints recorded it (format version 2)
        if ranks.is_main:
            print(
                f"note: {shown(path)} does not record which text it was trained on (saved by an older "
                f"tinygpt); resuming without checking that {shown(corpus.path)} is that text",
                file=sys.stderr,
            )
        return
    if saved.corpus_digest == corpus.digest:
        return
    was = (saved.run_section("data") or {}).get("val_fraction", config.data.val_fraction)
    if was != config.data.val_fraction:
        raise UserError(
            f"--resume: the run held out data.val_fraction = {was:g} of its corpus for validation, the "
            f"config says {config.data.val_fraction:g}, which would measure its losses on other text; "
            f"resume with --set data.val_fraction={was:g}"
        )
    raise UserError(
        f"--resume: {corpus.path} is not the text {path} was trained on (the same characters, other "
        f"contents: the file was edited, or data.corpus names another); {OTHER_TEXT}"
    )


def _check_same_model(saved: Checkpoint, model_config: GPTConfig, path: Path | None) -> None:
    config = vars(model_config)
    if saved.model_config != config:
        keys = [k for k in config if saved.model_config.get(k) != config[k]]
        differ = ", ".join(
            f"model.{k}: {saved.model_config.get(k)} in the run, {config[k]} in the config" for k in keys
        )
        raise UserError(
            f"--resume: the config's model differs from the one in {path} ({differ}); "
            "resume with the run's own config.yaml"
        )


def run_of_own_config(config_path: str, out_dir: str, overrides: list[str]) -> str:
    """The run to resume: a run directory's own config.yaml resumes that directory.

    config.yaml records the out_dir it was written for, so a copied run's config would
    otherwise resume (and change) the original. `--set out_dir=…` still decides.
    """
    here = Path(config_path).parent
    own = Path(config_path).name == "config.yaml" and any(
        (here / n).is_file() for n in ("last.pt", "best.pt")
    )
    if not own or any(o.partition("=")[0].strip() == "out_dir" for o in overrides):
        return out_dir
    if Path(out_dir).expanduser().resolve() != here.resolve():
        note = f"note: resuming {here}, whose config.yaml this is (it was written for {out_dir})"
        print(shown(note), file=sys.stderr)
    return str(here)


def resume_line(out_dir: str) -> str:
    """The command that continues the run in out_dir, from its own resolved config.yaml."""
    script = sys.argv[0]
    if Path(script).name != "train.py":
        program = "tinygpt train"
    elif os.environ.get("WORLD_SIZE", "1") != "1":  # started by torchrun, whose options we cannot see
        program = f"torchrun <its options as before> {shlex.quote(script)}"
    else:
        program = f"python {shlex.quote(script)}"
    return f"{program} --config {shlex.quote(str(Path(out_dir) / 'config.yaml'))} --resume"
