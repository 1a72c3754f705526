"""How many threads torch computes on, chosen by measuring the steps themselves.

torch runs one thread per core. On an idle 2-core machine two threads train and generate faster
than one; with one core kept busy by another process they are 2-50x slower, because every
multi-threaded operation waits for its slowest thread, and that thread waits for the other
process (BENCHMARKS.md, "Threads on a busy machine"). No fixed count is right on both, so `auto`
measures: the first steps run at each candidate count in turn (1, 2, 1, 2, ... up to the cores
this process may use and torch would use), and the rest run at the one whose median measurement
was shortest. A measurement covers at least `span` seconds of steps in a row at one count: a
generated character takes a millisecond or less, and two threads can run a few such steps at full
speed between the moments the other process holds their core (on a busy Xeon, measuring single
steps, `auto` chose 2 threads and generated at 0.06x one thread's rate: BENCHMARKS.md). If the
median of the recent measurements then drifts by more than 30% from the chosen count's, the
machine has changed (a job started or ended): the candidates are measured again, at most once every `gap`
steps. The steps measured are the real work (training steps, generation steps), so measuring
costs only the steps run at the slower count.

A count is pinned, and never measured, by a number (`train.threads: 1`, `sample --threads 1`) or by
OMP_NUM_THREADS or MKL_NUM_THREADS in the environment (torch has read them already).
"""

import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from tinygpt.errors import UserError

PINNING_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
T = TypeVar("T")


def pinned_by_environment() -> str | None:
    """The environment variable that fixes torch's threads, as `NAME=value`, or None."""
    for name in PINNING_VARIABLES:
        if os.environ.get(name, "").strip():
            return f"{name}={os.environ[name].strip()}"
    return None


def usable_cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def most_threads() -> int:
    """The most threads worth trying: the cores this process may run on, and no more than torch uses."""
    return max(1, min(usable_cores(), torch.get_num_threads()))


def threads_value(value: Any, name: str) -> int | str:
    """`auto` or a whole number ≥ 1 (as text from a command line too); else one UserError naming `name`."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise UserError(f"{name} {value} is not allowed; use auto or a whole number ≥ 1 (the CPU threads to use)")


class Threads:
    """The thread count for each step: `run(fn, ...)` calls fn at the count chosen (or being measured)
    and times it. A with block puts torch's count back as it found it.

    candidates: the counts to choose from (one: nothing is measured). pinned: why the count is fixed
    (shown beside it). rounds: measurements of each candidate a probe takes. window, drift, gap: the
    recent measurements whose median is watched, the change in it (a fraction) that starts a new probe, and
    the fewest steps between two probes. span: the least time (s) one measurement covers, in steps
    taken in a row at one count. clock and set_threads are injected by tests.
    """

    def __init__(
        self,
        candidates: Sequence[int],
        pinned: str | None = None,
        rounds: int = 3,
        window: int = 20,
        drift: float = 0.3,
        gap: int = 200,
        span: float = 0.01,
        clock: Callable[[], float] = time.perf_counter,
        set_threads: Callable[[int], None] = torch.set_num_threads,
    ):
        self.candidates, self.pinned = list(candidates), pinned
        self.rounds, self.drift, self.gap, self.span = rounds, drift, gap, span
        self.clock, self.set_threads = clock, set_threads
        self.recent: deque[float] = deque(maxlen=window)  # measurements since the probe
        self.chosen, self.reference = self.candidates[0], None  # the count, and its median step (s)
        self.probes, self.since_probe = 0, 0
        self.schedule: list[int] = []  # the counts still to measure in this probe, in order
        self.measured: dict[int, list[float]] = {}  # each count's measurements: mean seconds a step
        self.pending: list[float] = []  # the steps (s) of the measurement under way
        self.warm_up = len(self.candidates) > 1  # the first step (allocations, a compile) is not measured
        self.before = self.current = torch.get_num_threads()
        if len(self.candidates) == 1:
            self.use(self.chosen)
        else:
            self.start_probe()

    def __enter__(self) -> "Threads":
        return self

    def __exit__(self, *exc: object) -> None:
        self.use(self.before)

    def use(self, count: int) -> None:
        if count != self.current:
            self.set_threads(count)
            self.current = count

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), at the count this step runs at; its time goes into the choice."""
        with self.step():
            return fn(*args)

    def each(self, items: Iterable[T]) -> Iterator[T]:
        """The items, each one's step being the work the loop that takes it does before it asks for the
        next: run for a loop whose body is not one function."""
        for item in items:
            with self.step():
                yield item

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step: run at the chosen count (or the probe's next) and timed into the choice, unless it
        raises; with one candidate, neither."""
        if len(self.candidates) == 1:
            yield
            return
        count = self.chosen if self.warm_up or not self.schedule else self.schedule[0]
        self.use(count)
        start = self.clock()
        yield
        self.took(self.clock() - start)

    def took(self, seconds: float) -> None:
        """Count one step of `seconds` at the count it ran at (the probe's next, else the chosen one): into
        the probe under way, or the drift watch."""
        if self.warm_up:
            self.warm_up = False
        elif self.schedule:
            measurement = self.measure(seconds)
            if measurement is not None:
                self.measured.setdefault(self.schedule.pop(0), []).append(measurement)
                if not self.schedule:
                    self.finish_probe()
        else:
            self.since_probe += 1
            measurement = self.measure(seconds)
            if measurement is not None:
                self.recent.append(measurement)
                if self.drifted() and self.since_probe >= self.gap:
                    self.start_probe()

    def measure(self, seconds: float) -> float | None:
        """The mean step of the steps gathered, once they cover `span` seconds; None while they do not."""
        self.pending.append(seconds)
        if sum(self.pending) < self.span:
            return None
        mean, self.pending = statistics.fmean(self.pending), []
        return mean

    def start_probe(self) -> None:
        self.schedule = [c for _ in range(self.rounds) for c in self.candidates]  # interleaved: 1 2 1 2 …
        self.measured, self.pending = {}, []

    def finish_probe(self) -> None:
        medians = {c: statistics.median(times) for c, times in self.measured.items()}
        self.chosen = min(medians, key=medians.get)
        self.reference = medians[self.chosen]
        self.probes += 1
        self.since_probe = 0
        self.recent.clear()
        self.use(self.chosen)

    def drifted(self) -> bool:
        """Whether the median of a full window of recent measurements is off the probe's by more than
        `drift`."""
        if self.reference is None or len(self.recent) < (self.recent.maxlen or 0):
            return False
        ratio = statistics.median(self.recent) / self.reference
        return ratio > 1 + self.drift or ratio < 1 / (1 + self.drift)

    @property
    def shown(self) -> str:
        """The count for a progress bar: `2`, `1 pinned`, or `probing` while the first probe runs."""
        if self.pinned:
            return f"{self.chosen} pinned"
        return "probing" if self.reference is None else str(self.chosen)

    def described(self) -> str:
        """The choice in words, for the line a run prints before its first step."""
        if self.pinned:
            return f"{self.chosen} ({self.pinned})"
        if len(self.candidates) == 1:
            return f"{self.chosen} (the only count this process can use)"
        counts = ", ".join(map(str, self.candidates))
        return f"auto: measured over the first steps at {counts}, again when the step time drifts"


def threads_for(
    setting: int | str, name: str, device: torch.device, why_fixed: str | None = None, **options: Any
) -> Threads:
    """The Threads a run uses: `setting` (given as `name`: train.threads, --threads) is `auto` or a count;
    a count wins over the environment, which pins `auto`. why_fixed: why `auto` should not measure here
    (torchrun's ranks); off the CPU, torch's threads hardly matter and are left as they are."""
    if setting != "auto":
        count, cores = int(setting), usable_cores()
        if count > cores:  # more threads than cores never computes faster, and tens of thousands crash OpenMP
            raise UserError(
                f"{name} {count} is more than the {cores} CPU(s) this process can use; use auto, or a count "
                f"from 1 to {cores}"
            )
        return Threads([count], pinned=f"{name} {setting}", **options)
    fixed = pinned_by_environment() or why_fixed or (None if device.type == "cpu" else f"on {device.type}")
    if fixed:
        return Threads([torch.get_num_threads()], pinned=fixed, **options)
    return Threads(range(1, most_threads() + 1), **options)
