"""tinygpt from Python: what the commands do, as functions a notebook calls (`tinygpt.train`,
`tinygpt.load`, `tinygpt.timeline`). The commands are built on these, so both give the same numbers
and the same one-line UserError for a mistake (it names the command's option or the config key).

    record = tinygpt.train("cpu_quick", out_dir="runs/quick", train={"max_iters": 300})
    lm = tinygpt.load("runs/quick")             # see tinygpt.app.loaded for what it does
    tinygpt.timeline("runs/quick")              # the run's snapshots, with a slider in a notebook
    tinygpt.attention_by_hand([1, 0.5], [[1, 0], [0.5, 1]], [[0.5, 1], [1, 0]])   # no model needed
"""

import json
import os
from pathlib import Path
from typing import Any

from tinygpt.config.run_config import RunConfig, load_config
from tinygpt.errors import UserError, described
from tinygpt.explain.inline import CELL_LIVE_LIMIT
from tinygpt.explain.inspected import Inspected
from tinygpt.explain.page import page_data
from tinygpt.explain.timeline import (
    from_checkpoints,
    listeners_for,
    run_directory,
    timeline_of,
    timeline_table,
)
from tinygpt.explain.views import ByHand, Timeline
from tinygpt.explain.walkthrough import walkthrough_of_vectors
from tinygpt.files.checkpoint import read_checkpoint


def train(
    config: str | Path | RunConfig, *, resume: bool = False, progress: bool = True, **overrides: Any
) -> dict:
    """Train a model as `tinygpt train` does: the same run directory, lock, resume and errors.

    Args:
        config: a YAML file, a shipped config by name ("cpu", "cpu_quick", …), or a RunConfig.
        resume: continue the run in out_dir from its last.pt (`--resume`).
        progress: show the progress bar.
        **overrides: config values, as `--set` gives them: a section's keys as a dict
            (`train={"max_iters": 300}`), a dotted key (`**{"train.max_iters": 300}`), or `out_dir=...`.

    Returns:
        The training record: step, best_val_loss, tokens, wall time and the last losses.
    """
    from tinygpt.training.loop import train as run_training  # here: looking inside needs no training

    if not isinstance(config, str | os.PathLike | RunConfig):
        raise UserError(f"config {described(config)} is not a path; pass a YAML file's name or a RunConfig")
    if isinstance(config, RunConfig):
        if overrides:
            raise TypeError("overrides go with a config file's name; change a RunConfig's fields directly")
    else:
        config = load_config(config, overrides_of(overrides))
    return run_training(config, resume=resume, progress=progress, listeners=listeners_for(config))


def overrides_of(values: dict[str, Any]) -> list[str]:
    """`--set` strings for keyword overrides: {"train": {"max_iters": 3}, "out_dir": "x"} ->
    ["train.max_iters=3", "out_dir=x"]; a value is written as JSON (YAML reads it back as it was)."""
    flat: list[str] = []
    for key, value in values.items():
        if isinstance(value, dict):
            flat += overrides_of({f"{key}.{k}": v for k, v in value.items()})
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            flat.append(f"{key}={text}")
    return flat


def timeline(run: str | Path, from_saved_checkpoints: bool = False) -> Timeline:
    """A run's timeline (its snapshots at every evaluation), as `inspect RUN --timeline` prints it; in a
    notebook, the page's timeline with its slider. run: a run directory or a checkpoint in one.
    from_saved_checkpoints: write the timeline of a run that recorded none (`--from-checkpoints`)."""
    if not isinstance(run, str | os.PathLike):
        raise UserError(f"run {described(run)} is not a path; pass a str or a pathlib.Path")
    run_dir = run_directory(run)
    snapshots = from_checkpoints(run_dir) if from_saved_checkpoints else timeline_of(run_dir)
    saved_files = [run_dir / name for name in ("best.pt", "last.pt") if (run_dir / name).is_file()]
    page = None
    if saved_files:  # the page is built around a checkpoint: the run's best (or last)
        path = saved_files[0]

        def page():
            saved = read_checkpoint(path)
            loaded = Inspected(path, saved, saved.build_model(path))
            return page_data(path, saved.chars[0], live_limit=CELL_LIVE_LIMIT, loaded=loaded, view="timeline")

    return Timeline(timeline_table(snapshots), snapshots, view="timeline", page=page)


def attention_by_hand(q: list[float], keys: list[list[float]], values: list[list[float]]) -> ByHand:
    """softmax(q·kᵀ/√d)·V for one query on numbers small enough to check by hand, every step shown, as
    `tinygpt explain --q … --keys … --values …` prints it; `.row` holds each step's numbers."""
    text, row = walkthrough_of_vectors(q, keys, values)
    return ByHand(text, row)
