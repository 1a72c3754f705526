"""Training: a config in, a run directory with checkpoints and metrics out.

`train` takes the run directory and the signals, then `_train` reads top to
bottom: set up, then one optimizer step per iteration, evaluating and saving
every eval_interval steps and always at the last step. What the loop keeps
between steps lives in one `Training` object, whose methods are the things the
loop does at an evaluation, at a save, at a stop and on divergence.

Why the untrained model is saved: the evaluation at step 0 writes last.pt and best.pt before
the first optimizer step, with the model's initial weights and the optimizer's and batch
sampler's states. From that moment a run directory always holds a last.pt that agrees with its
metrics.jsonl, so a run stopped, killed or crashed at any later point can be resumed with
--resume onto the batches the unbroken run would draw (tests/end_to_end/test_fault_injection.py), and
`sample`, `inspect` and the timeline work from the first evaluation on; and best.pt exists even
for a run whose later evaluations never beat its first (one that diverges at once). The cost is
one save of an untrained model. A directory holding only that (a run killed before its first
later save) is not counted as work to protect (run_dir.RunDirectory.work).
"""

import dataclasses
import math
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

import torch
from tqdm import tqdm

from tinygpt.config.run_config import RunConfig
from tinygpt.data.corpus import Corpus
from tinygpt.device import pick_device
from tinygpt.errors import UserError, shown
from tinygpt.files.checkpoint import build_checkpoint, read_checkpoint, save_checkpoint
from tinygpt.model import GPT
from tinygpt.training.budget import Budget
from tinygpt.training.distributed import Ranks, process_group
from tinygpt.training.divergence import LossWatch
from tinygpt.training.interrupt import Interrupted, StopRequest
from tinygpt.training.loggers import Loggers
from tinygpt.training.precision import out_of_memory
from tinygpt.training.progress import Bar, print_summary
from tinygpt.training.resume import RESUME_ADVICE, Progress, where_it_starts
from tinygpt.training.run_dir import RunDirectory, saved_step
from tinygpt.training.set_up import Setup, set_up
from tinygpt.training.step import Abandoned, estimate_loss, global_batch, lr_at

clock = time.perf_counter  # the run's wall time: evaluations' speed, the record, the time budget


class Listener(Protocol):
    """Told of every evaluation on rank 0, after metrics.jsonl and before last.pt (as --resume expects).

    The timeline's recorder is one (tinygpt.explain.timeline.listeners_for(config), which
    `tinygpt train` hands to `train`); training itself knows nothing of what it records.
    """

    def start(self, corpus: Corpus, block_size: int, run_dir: Path) -> None:
        """Before the first step: a mistake in what the listener was asked for stops the run here."""

    def evaluated(self, step: int, losses: dict[str, float], model: GPT) -> None:
        """After the evaluation at `step`; leaves the model's mode as found."""


def train(
    config: RunConfig, resume: bool = False, progress: bool = True, listeners: Sequence[Listener] = ()
) -> dict[str, Any]:
    """Train as config says; returns the training record (also saved in the checkpoints).

    Started by torchrun, each process trains one replica with DistributedDataParallel
    (see tinygpt.training.distributed); started plainly, it is one process. The run
    directory is locked for the whole run (by rank 0, which writes it). The first Ctrl-C
    or SIGTERM stops the run at the end of a step with last.pt saved, by raising
    `Interrupted` (see tinygpt.training.interrupt). `listeners` are told of each evaluation.
    """
    with (
        Loggers(config) as loggers,  # first: a logger's missing package is told before any work
        process_group(pick_device(config.train.device)) as ranks,
        RunDirectory(config.out_dir) as run,
        StopRequest() as stop,
    ):
        try:
            return _train(config, resume, progress, ranks, run, stop, loggers, listeners)
        except RuntimeError as error:
            if not out_of_memory(error):
                raise
            raise UserError(
                f"out of memory on {ranks.device.type}: a training step needs more than is free; make "
                "train.batch_size smaller (train.grad_accum_steps keeps the batch per optimizer step), "
                f"or model.block_size, or the model; any checkpoints already in {run.path} are intact "
                "(--resume continues from last.pt)"
            ) from None


def _train(
    config: RunConfig,
    resume: bool,
    progress: bool,
    ranks: Ranks,
    run: RunDirectory,
    stop: StopRequest,
    loggers: Loggers,
    listeners: Sequence[Listener],
) -> dict[str, Any]:
    # ---------------------------------------------------------------- set-up
    t = config.train
    saved_path = run.resume_point() if resume else None  # last.pt; best.pt where a run left no last.pt
    saved = read_checkpoint(saved_path, advice=RESUME_ADVICE) if saved_path else None
    setup = set_up(config, ranks, saved, saved_path)
    if ranks.is_main:
        run.prepare(config, resume)
    else:  # rank 0 locks and writes the run directory
        run.check(resume)
    state, evaluated_at_start = where_it_starts(saved, saved_path, setup, run)
    start_step = state.step
    if ranks.is_main:
        print_summary(setup, run.path, start_step)
    last_saved = start_step if saved_path == run.last else None  # the step last.pt holds
    training = Training(setup, run, state, stop, last_saved, loggers, listeners, Budget.set_up(t, saved))
    if ranks.is_main:  # rank 0 logs, as it writes metrics.jsonl
        first_logged = start_step + 1 if evaluated_at_start else start_step
        loggers.start(run.path, first_logged, resumed=saved is not None)
    if saved is not None and ranks.is_main:
        training.repair_best()

    # ---------------------------------------------------------------- loop
    with Bar(setup, start_step, shown=progress and ranks.is_main) as bar, setup.threads:
        step = start_step
        stop.arm()
        while True:
            last_step = step == t.max_iters
            done_before = evaluated_at_start and step == start_step  # by the run that saved last.pt
            if (step % t.eval_interval == 0 or last_step) and not done_before:
                training.evaluate(step, bar.tqdm)
            if last_step:
                break
            signum = _agreed_stop(stop, ranks, step, t.log_interval)
            if signum:  # Ctrl-C or SIGTERM came during the step just finished: save it and stop
                training.stop(step, signum)

            if step == start_step and t.compile:  # torch.compile works at the first call: a minute on a CPU
                bar.tqdm.set_description("compiling the model (first step)")
            try:
                loss, grad_norm = abandonable(setup, stop, step)
            except Abandoned:  # a stop came between the micro-batches of a step: save the one before
                training.stop(step, stop.signum)
            step += 1
            training.stepped(step, loss, grad_norm)
            bar.stepped()
            if step % t.log_interval == 0:  # .item() waits for the device: only at log intervals
                training.check_losses(step)
                bar.show(loss.item(), lr_at(step - 1, t))
                training.fit(step, bar.tqdm)  # to a time budget, if the run has one
    return training.finish()


class Training:
    """A run in progress: its set-up, where it stands, and what the loop does besides stepping."""

    def __init__(
        self,
        setup: Setup,
        run: RunDirectory,
        progress: Progress,
        stop: StopRequest,
        last_saved: int | None,
        loggers: Loggers,
        listeners: Sequence[Listener],
        budget: Budget | None,
    ):
        self.setup = setup
        self.budget = budget  # train.max_minutes: max_iters fitted to it as the run goes
        self.loggers = loggers
        self.grad_norm: torch.Tensor | None = None  # the last step's, before clipping
        self.since = (clock(), progress.tokens_seen)  # the previous evaluation: when, tokens
        self.run = run
        self.stop_request = stop
        self.progress = progress
        self.last_saved = last_saved  # the step last.pt holds
        self.started = clock() - progress.wall_time_s
        t = setup.config.train
        checked_every = min(t.log_interval, t.eval_interval, t.max_iters)  # most steps between checks
        self.watch = LossWatch(checked_every, setup.ranks.device, last_checked=progress.step)
        self.listeners = list(listeners) if setup.ranks.is_main else []  # rank 0 writes the run directory
        for listener in self.listeners:
            listener.start(setup.corpus, setup.model.config.block_size, run.path)

    def stepped(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Count the step just taken (`step` is the count so far); keep its loss for the watch."""
        self.progress.step = step
        self.progress.tokens_seen += self.setup.tokens_per_step
        self.watch.add(step, loss)
        self.grad_norm = grad_norm

    def evaluate(self, step: int, bar: tqdm) -> None:
        """Estimate both losses, log them, and save last.pt (and best.pt on a new best)."""
        s, p, t = self.setup, self.progress, self.setup.config.train
        self.check_losses(step)  # reads the losses: the steps so far have finished on the device
        trained = self.since_evaluation()  # before the evaluation's own time
        asked = lambda: self.stop_request.requested  # noqa: E731
        # the bar stands still meanwhile (14-22 s at step 0 of cpu.yaml): say why, until the saves are done
        bar.set_description(f"evaluating step {step} ({t.eval_iters} batches a split)")
        losses = estimate_loss(
            s.model, s.splits, t.eval_iters, t.seed + 1, s.precision.autocast, s.ranks, asked
        )
        if losses is None:  # a stop came during the evaluation: abandoned, nothing of it written
            self.stop(step, self.stop_request.signum)
        if not all(math.isfinite(v) for v in losses.values()):
            self.diverged(f"the evaluation at step {step} gave losses {losses}")
        p.step, p.train_loss, p.val_loss = step, losses["train"], losses["val"]
        p.wall_time_s = clock() - self.started
        improved = losses["val"] < p.best_val_loss  # the same on every rank: losses are summed
        if improved:
            p.best_val_loss, p.best_step = losses["val"], step
        if s.ranks.is_main:
            entry = {
                "step": step,
                "tokens": p.tokens_seen,
                "train_loss": losses["train"],
                "val_loss": losses["val"],
                "lr": lr_at(step, t),
                "time_s": p.wall_time_s,
            }
            # the loggers first: a step metrics.jsonl holds, they hold too (see tinygpt.training.loggers)
            self.loggers.log(step, entry | trained, s.model, s.corpus.tokenizer, s.corpus.val)
            self.run.log(entry)
            for listener in self.listeners:  # after metrics.jsonl and before last.pt, as --resume expects
                listener.evaluated(step, losses, s.model)
            best = " (best)" if improved else ""
            bar.write(f"step {step:>6}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}{best}")
        if self.last_saved != step:  # step 0's too (the note at the top: why the untrained model is saved)
            self.save(self.run.last, with_state=True)
        if improved:  # step 0 too (the note at the top)
            self.save(self.run.best, with_state=False)
        bar.set_description("")
        self.since = (clock(), p.tokens_seen)

    def fit(self, step: int, bar: tqdm) -> None:
        """max_iters fitted to the time budget at `step`, a log interval's end (training/budget.py), the same
        on every rank."""
        s, t = self.setup, self.setup.config.train
        if self.budget is None:
            return
        elapsed = clock() - self.started
        if s.ranks.distributed:  # the slowest rank's clock, so that every rank fits the same max_iters
            elapsed = s.ranks.max(torch.tensor(elapsed, dtype=torch.float64, device=s.ranks.device)).item()
        max_iters, changed = self.budget.max_iters(step, elapsed, t.max_iters)
        if not changed:
            return
        if s.ranks.is_main:
            said = (
                "spent: the run ends here" if max_iters == step else f"max_iters {t.max_iters} -> {max_iters}"
            )
            bar.write(f"time budget {t.max_minutes:g} min, {elapsed / 60:.2f} in at step {step}: {said}")
        t.max_iters = bar.total = max_iters
        bar.refresh()

    def since_evaluation(self) -> dict[str, float]:
        """Training speed since the previous evaluation, and the last step's gradient norm (if any step)."""
        started, tokens = self.since
        if self.progress.tokens_seen == tokens or self.grad_norm is None:
            return {}
        seconds = clock() - started
        return {
            "tokens_per_s": (self.progress.tokens_seen - tokens) / seconds,
            "grad_norm": self.grad_norm.item(),
        }

    def repair_best(self) -> None:
        """Rewrite best.pt from last.pt when last.pt holds the best weights it records and best.pt does not.

        last.pt is saved before best.pt, so a run killed between the two (or whose best.pt
        save failed on a full disk) leaves last.pt holding the best weights, and best.pt
        behind: this puts the two back in agreement.
        """
        p = self.progress
        if p.best_step != p.step or saved_step(self.run.best) == p.step:
            return
        print(
            f"note: {shown(self.run.best)} did not hold step {p.step}, the best evaluation "
            f"{shown(self.run.last)} records; rewritten from it",
            file=sys.stderr,
        )
        self.save(self.run.best, with_state=False)

    def stop(self, step: int, signum: int) -> NoReturn:
        """Save the step just finished (unless last.pt holds it) and raise Interrupted."""
        self.check_losses(step)
        if self.last_saved != step:
            self.progress.wall_time_s = clock() - self.started
            self.save(self.run.last, with_state=True)
        name = signal.Signals(signum).name
        raise Interrupted(signum, f"stopped by {name} at step {step}; saved {self.run.last}")

    def save(self, path: Path, with_state: bool) -> None:
        """A checkpoint of the current model; with optimizer and random states (every rank's) for last.pt."""
        s = self.setup
        rank_rng = s.ranks.gather(s.rng_state()) if with_state else None  # every rank takes part
        # a step can ruin the weights while its own loss is finite (an infinite gradient): never save them
        if s.ranks.is_main and not torch.stack([p.isfinite().all() for p in s.model.parameters()]).all():
            self.diverged(f"the weights are no longer finite at step {self.progress.step}")
        with self.stop_request.saving(path.name):  # a second signal meanwhile waits for a whole file
            if s.ranks.is_main:
                optimizer = s.optimizer.state_dict() if with_state else None  # the same on every rank
                made = build_checkpoint(
                    s.model, s.corpus.tokenizer, s.config.to_dict(), self.record(), optimizer, rank_rng
                )
                made.corpus_digest = s.corpus.digest  # for --resume to check the text is the same
                save_checkpoint(made, path)
        if with_state:
            self.last_saved = self.progress.step  # on every rank: a stop saves only where none is

    def check_losses(self, step: int) -> None:
        """Stop if any training loss up to `step` was NaN or infinite."""
        found = self.watch.check(step)
        if found:
            self.diverged(f"the loss was {found[1]} at step {found[0]}")

    def diverged(self, what: str) -> NoReturn:
        t = self.setup.config.train
        kept = (
            f"{self.run.last} still holds step {self.last_saved}, to --resume from"
            if self.last_saved is not None
            else "no checkpoint had been saved yet"
        )
        clip = f"lower train.grad_clip (now {t.grad_clip:g})" if t.grad_clip > 0 else "set train.grad_clip"
        lr = f"lower train.learning_rate (now {t.learning_rate:g})"
        raise UserError(f"training diverged: {what}; {lr} or {clip}; {kept}")

    def finish(self) -> dict[str, Any]:
        """The record of the run as it ends."""
        self.progress.wall_time_s = clock() - self.started
        return self.record()

    def record(self) -> dict[str, Any]:
        """The training record: progress, and how and where it was made."""
        s = self.setup
        return {
            **dataclasses.asdict(self.progress),
            "device": str(s.ranks.device),
            "dtype": s.precision.dtype,
            "torch_version": str(torch.__version__),
            "num_params": s.model.num_params(),
            "world_size": s.ranks.world_size,
            "global_batch": global_batch(s.config.train, s.ranks),
        }


def abandonable(setup: Setup, stop: StopRequest, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step` at the threads chosen (threads.py). In one process, a step of several micro-batches
    is abandoned between them when a stop is asked for (Abandoned), its random states put back as
    they were before it, so that last.pt resumes exactly where the run stopped. Under torchrun the
    ranks stop together between steps (_agreed_stop)."""
    if setup.config.train.grad_accum_steps == 1 or setup.ranks.world_size > 1:
        return setup.threads.run(setup.step, step)
    before = setup.rng_state()
    try:
        return setup.threads.run(setup.step, step, lambda: stop.requested)
    except Abandoned:
        setup.set_rng_state(before)
        raise


def _agreed_stop(stop: StopRequest, ranks: Ranks, step: int, every: int) -> int | None:
    """The signal to stop on at this step, the same on every rank; None to go on.

    One process stops at the end of the step in which the signal came. Several
    must stop at the same step (a checkpoint gathers from all of them), so they
    compare notes every `every` steps, one all-reduce there and no waiting on
    each other in between: they stop at the first such step after any was told to.
    """
    if not ranks.distributed:
        return stop.signum
    if step % every:
        return None
    return int(ranks.max(torch.tensor(stop.signum or 0, device=ranks.device)).item()) or None
