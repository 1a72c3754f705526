"""A time budget for training (`train.max_minutes`): the steps that fit, measured as the run goes.

A schedule fixed in steps ends when its steps do, however long they take: a run meant for ten minutes
takes twenty on a slower or a busy machine, and one cut short by hand ends before its learning rate
has decayed. With `train.max_minutes` set, the run measures its own rate and fits max_iters to the
steps that fit into the budget, at REFITS shares of it, each time at the rate since the fit before
(steps, evaluations and saves together), so that the decay ends at the budget: the last fit, at 85%,
is off only by how the machine's speed drifts over the rest. The first check only starts the clock
the rate is measured by, past the run's start-up (the evaluation at step 0, the threads' probe);
before the last fit, a max_iters the run would reach with more than a twentieth of the budget left is
fitted again. The configured max_iters stays the most steps the run takes. A run whose clock passes
the budget before its last step (the machine slowed down) is evaluated and saved there, and ends. The
final evaluation comes after the budget.

Time counts from the run's start, the evaluation at step 0 included. A resumed run goes on from the
time its last.pt records: with the max_iters fitted before, where it had the same budget
(`resumed_max_iters`); resumed with another, it fits at its first check, at the rate since the run's
start (the whole run's steps over its whole time). The clock is read every log_interval steps, and
under torchrun the ranks take the slowest one's time, so that every rank sets the same max_iters at
the same step. Bit-identical reruns need a fixed max_iters: a fitted one depends on the machine's speed.
"""

from dataclasses import dataclass, field
from typing import Any

from tinygpt.config.run_config import TrainSection
from tinygpt.files.checkpoint import Checkpoint

REFITS = (0.1, 0.3, 0.6, 0.85)  # shares of the budget at which max_iters is fitted to the rate so far
EARLY = 0.95  # before the last fit, a run that would end before this share of its budget is fitted again


@dataclass
class Budget:
    """The budget in seconds, the most steps the config allows, the steps between checks, and where the
    rate is measured from (None until the first check starts its clock)."""

    seconds: float
    most_steps: int
    every: int
    fitted_at: tuple[int, float] | None  # (step, seconds into the run) of the last fit
    refits: list[float] = field(default_factory=list)  # the seconds into the run still to fit at

    @classmethod
    def set_up(cls, t: TrainSection, saved: Checkpoint | None) -> "Budget | None":
        """The budget of a run configured as t (None without one), resuming `saved` (None: a new run).

        A run resumed with the budget it had goes on with the max_iters fitted then (set in t here);
        one resumed with another fits at its first check, at the rate since the run's start."""
        if not t.max_minutes:
            return None
        seconds, most_steps = t.max_minutes * 60, t.max_iters
        shares = [r * seconds for r in REFITS]
        if saved is None:
            return cls(seconds, most_steps, t.log_interval, None, shares)
        fitted = resumed_max_iters(t, saved.run_section("train"))
        if fitted is None:
            return cls(seconds, most_steps, t.log_interval, (0, 0.0), [0.0, *shares])
        t.max_iters = fitted
        return cls(seconds, most_steps, t.log_interval, None, shares)

    def max_iters(self, step: int, elapsed: float, current: int) -> tuple[int, bool]:
        """max_iters from `step` on, `elapsed` seconds into the run, and whether it changed: `step` itself
        once the budget is spent (the run ends there), the steps that fit at a refit, else `current`.

        The first check only starts the clock the rate is measured by, past the run's start-up (the
        evaluation at step 0, the threads' probe), and passes over the shares already behind it (a
        resumed run's); and until the last fit, a max_iters the run would reach before the next check,
        with more than a twentieth of the budget left, is fitted again (an early fit measured too slow
        a rate)."""
        if elapsed >= self.seconds:
            return step, current != step
        if self.fitted_at is None:
            self.fitted_at = (step, elapsed)
            self.refits = [r for r in self.refits if r > elapsed]
            return current, False
        if step >= self.most_steps:  # the configured max_iters reached, before the budget
            return current, False
        due = bool(self.refits) and elapsed >= self.refits[0]
        early = bool(self.refits) and current - step <= self.every and elapsed < EARLY * self.seconds
        if not (due or early):
            return current, False
        while self.refits and elapsed >= self.refits[0]:
            self.refits.pop(0)
        since_step, since = self.fitted_at
        rate = (step - since_step) / max(elapsed - since, 1e-9)  # steps a second, since the last fit
        self.fitted_at = (step, elapsed)
        fitted = min(self.most_steps, max(step + 1, step + int((self.seconds - elapsed) * rate)))
        return fitted, fitted != current


def resumed_max_iters(t: TrainSection, saved_train: dict[str, Any] | None) -> int | None:
    """The max_iters a run resumed from a last.pt whose config is saved_train goes on with: the one fitted
    before (within t's), where the saved run had the same budget; None where it had another (or none)."""
    if not saved_train or saved_train.get("max_minutes") != t.max_minutes:
        return None
    fitted = saved_train.get("max_iters")
    if isinstance(fitted, int) and not isinstance(fitted, bool) and fitted >= 1:
        return min(t.max_iters, fitted)
    return None
