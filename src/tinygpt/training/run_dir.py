"""A run directory, checkpoints/<run>/: what is in it, and taking it for one training run.

    config.yaml      the resolved config
    metrics.jsonl    one JSON object per evaluation (tinygpt.files.metrics)
    timeline.jsonl   a snapshot of every head at each evaluation (tinygpt.files.snapshots)
    last.pt          the latest state, for --resume
    best.pt          the model at its lowest validation loss
    lock             held while a run writes here (tinygpt.training.lock)

Every file here is written through tinygpt.files.atomic.write_atomic (metrics.jsonl and timeline.jsonl
are appended).
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tinygpt.config.run_config import RunConfig
from tinygpt.errors import UserError, shown
from tinygpt.files.atomic import write_atomic
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.metrics import append_metrics, read_metrics, rewind_metrics
from tinygpt.files.snapshots import FILE_NAME as TIMELINE
from tinygpt.files.snapshots import rewind_timeline
from tinygpt.training.lock import RunLock

NAME_MAX = 255  # bytes in one file name, on the file systems tinygpt runs on


def checked_path(out_dir: str | Path) -> Path:
    """out_dir as a path (`~` expanded, as for data.corpus), or a UserError for one no file system takes."""
    text = str(out_dir)
    if "\x00" in text:
        raise UserError(
            f"out_dir {text!r} holds a NUL character, which no file name can; choose another out_dir"
        )
    try:
        parts = [part.encode() for part in Path(text).parts]
    except UnicodeEncodeError:
        raise UserError(
            f"out_dir {text!r} is not valid text (a lone surrogate); choose another out_dir"
        ) from None
    if any(len(part) > NAME_MAX for part in parts):
        raise UserError(
            f"out_dir {text[:60]!r}… has a name longer than {NAME_MAX} bytes, which file systems refuse; "
            "choose a shorter out_dir"
        )
    path = Path(text).expanduser()
    if path.is_symlink() and not path.exists():
        raise UserError(
            f"out_dir {path} is a symbolic link to nothing (or a loop of links); remove it or choose another"
        )
    return path


class RunDirectory:
    """The files of one run. A context manager: the lock taken by `prepare` is released on leaving."""

    def __init__(self, path: str | Path):
        self.path = checked_path(path)
        self.last = self.path / "last.pt"
        self.best = self.path / "best.pt"
        self.metrics = self.path / "metrics.jsonl"
        self.timeline = self.path / TIMELINE
        self.lock = RunLock(self.path)

    def __enter__(self) -> "RunDirectory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def check(self, resume: bool) -> None:
        """Refuse a directory that cannot take this run: a file; nothing to resume; a run in the way,
        which is never overwritten (whatever it holds of a run's work: checkpoints, evaluations)."""
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"out_dir {self.path} is a file, not a directory; choose another out_dir")
        if resume and self.resume_point() is None:
            raise UserError(
                f"--resume: there is no {self.last} to resume from; train without --resume to start this run"
            )
        if not resume and self.last.exists():
            raise UserError(
                f"{self.path} already holds a run; add --resume to continue it, or start a "
                f"new one elsewhere with --set out_dir=checkpoints/<new name>"
            )
        work = "" if resume else self.work()
        if work:
            choice = (
                "add --resume to continue from best.pt's weights" if self.best.is_file() else "remove them"
            )
            raise UserError(
                f"{self.path} already holds a run's {work} but no last.pt; {choice}, or start a new run "
                f"elsewhere with --set out_dir=checkpoints/<new name>"
            )

    def resume_point(self) -> Path | None:
        """The checkpoint --resume continues from: last.pt; or best.pt, which a run leaves alone only
        when its last.pt was removed or (before step 0's last.pt was saved) never written."""
        return next((p for p in (self.last, self.best) if p.is_file()), None)

    def say_resuming_from_best(self, step: int) -> None:
        print(
            f"note: {shown(self.path)} has no last.pt; resuming from best.pt (step {step}): its weights, "
            "with the optimizer's state and the batches started afresh (best.pt does not keep them)",
            file=sys.stderr,
        )

    def work(self) -> str:
        """The run's work this directory holds, in words ('' for none): a best.pt, and evaluations.

        A step-0 evaluation alone is not work: it is of the untrained model, and a run killed
        before its first last.pt leaves it (and config.yaml) behind, to be started again.
        """
        steps = [e["step"] for e in read_metrics(self.metrics)] if self.metrics.is_file() else []
        step = saved_step(self.best)
        held = (
            [f"best.pt ({'which does not read' if step is None else f'step {step}'})"]
            if self.best.exists()
            else []
        )
        if steps and (held or max(steps) > 0):
            held.append(f"metrics.jsonl ({len(steps)} evaluations, to step {max(steps)})")
        return ", ".join(held)

    def prepare(self, config: RunConfig, resume: bool) -> None:
        """Lock the directory, then write config.yaml and clear what a killed run left half-done.

        A directory that exists is locked before its contents are checked, so that a run still training
        there is named as such, not as a run to --resume; a new one is made once the checks pass.
        """
        existed = self.path.is_dir()
        if existed:
            with self._writing():
                self.lock.acquire()
        self.check(resume)
        with self._writing():
            if not existed:
                self.path.mkdir(parents=True, exist_ok=True)
                self.lock.acquire()  # before anything in the directory changes
            write_atomic(self.path / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=False))
            if not resume:  # what a run that died before its first checkpoint logged
                self.metrics.unlink(missing_ok=True)
                self.timeline.unlink(missing_ok=True)
            for partial in self.path.glob(".*.partial"):  # left by a save that was killed (we hold the lock)
                partial.unlink()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """An OSError while locking or writing the directory: the out_dir's to fix, said in one line."""
        try:
            yield
        except OSError as e:
            raise UserError(
                f"cannot write to run directory {self.path}: {e.strerror}; choose a writable out_dir"
            ) from None

    def rewind_metrics(self, step: int) -> None:
        """Forget what a run that died after last.pt logged beyond it: the resumed run logs it again."""
        rewind_metrics(self.metrics, step)
        rewind_timeline(self.timeline, step)

    def log(self, entry: dict[str, Any]) -> None:
        append_metrics(self.metrics, entry)


def saved_step(path: Path) -> int | None:
    """The step a checkpoint's record holds, or None if it is missing or does not read."""
    try:
        return read_checkpoint(path).step
    except UserError:
        return None
