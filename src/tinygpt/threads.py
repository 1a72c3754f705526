"""How many threads torch computes on, chosen by measuring the steps themselves.

torch runs one thread per core. On an idle 2-core machine two threads train and generate faster than
one; with one core kept busy by another process they are 2-50x slower, because every multi-threaded
operation waits for its slowest thread, and that thread waits for the other process (BENCHMARKS.md,
"Threads on a busy machine"). No fixed count is right on both, so `auto` measures: the first steps
run at each candidate count in turn (1, 2, 1, 2, ... up to the cores this process may use and torch
would use), and the rest run at the one whose median measurement was shortest. Only the counts that
fit in the cores no other process is running on are measured (Linux's procs_running, less this
process's own running threads, at the start of a probe): one multi-threaded step beside a busy core
can wait 100 ms for it, longer than a whole short generation, so a count that does not fit is not
tried; while fewer threads than the most run, the idle cores are looked at again every `gap` steps
(and second), and more of them measure the counts again. A probe ends after a round (the first, most
often) once one count's measurements are all `clear`ly (2x) faster than every other count's: there
the slower count's further rounds would only cost its slow steps. A choice made so early rests on
one measurement of each count, which a step descheduled for a moment could upset, so a probe of all
its rounds checks it `gap` steps later.

A measurement covers at least `span` seconds of steps in a row at one count: a generated character
takes a millisecond or less, and two threads can run a few such steps at full speed between the
moments the other process holds their core (on a busy Xeon, measuring single steps, `auto` chose 2
threads and generated at 0.06x one thread's rate: BENCHMARKS.md). If the median of the recent
measurements then drifts by more than 30% from the chosen count's, the machine has changed (a job
started or ended): the candidates are measured again, at most once every `gap` steps. The steps
measured are the real work (training steps, generation steps), so measuring costs only the steps run
at the slower count.

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


def idle_cores(reads: int = 3, apart: float = 0.002) -> int | None:
    """The CPUs no other process is running on now: the machine's, less the threads of other processes that
    are running or waiting to run. A read that sees none is taken at once; one that sees some is read
    again, up to `reads` times `apart` seconds apart, and the fewest taken: right after a two-thread
    step, one read saw another process on an idle machine 7% of the time (our own threads settling, a
    kernel worker), three reads 2 ms apart never in 179. None where that cannot be told: not Linux, or
    this process may use only some of the machine's CPUs (the count is the whole machine's)."""
    cpus = os.cpu_count()
    if cpus is None or usable_cores() != cpus:
        return None
    try:
        others = other_threads_running()
        for _ in range(reads - 1):
            if others <= 0:
                break
            time.sleep(apart)
            others = min(others, other_threads_running())
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return cpus - max(0, others)


def other_threads_running() -> int:
    """Threads of other processes running or waiting to run, read once (/proc/stat's procs_running less
    this process's own that are, counted before and after it and the larger taken)."""
    ours = own_threads_running()
    with open("/proc/stat") as stat:
        running = next(int(line.split()[1]) for line in stat if line.startswith("procs_running"))
    return running - max(ours, own_threads_running())


def own_threads_running() -> int:
    """This process's threads that are running or waiting to run."""
    return sum(own_thread_running(task.path) for task in os.scandir("/proc/self/task"))


def own_thread_running(task: str) -> bool:
    """Whether the thread whose /proc directory is `task` is running (state R); a thread that has
    ended meanwhile is not."""
    try:
        with open(f"{task}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "R"  # after the name, which may hold spaces
    except OSError:
        return False


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
    (shown beside it). rounds: measurements of each candidate a probe takes (at most). clear: the ratio
    between a count's measurements and the fastest's that ends a probe after a round. window, drift, gap: the
    recent measurements whose median is watched, the change in it (a fraction) that starts a new probe, and
    the fewest steps between two probes, and between two looks at the idle cores. span: the least time (s)
    one measurement covers, in steps taken in a row at one count. look: the least time (s) between two
    looks at the idle cores after a probe. idle: the cores idle now (None: not known); clock and
    set_threads: injected by tests.
    """

    def __init__(
        self,
        candidates: Sequence[int],
        pinned: str | None = None,
        rounds: int = 3,
        clear: float = 2.0,
        window: int = 20,
        drift: float = 0.3,
        gap: int = 200,
        span: float = 0.01,
        look: float = 1.0,
        idle: Callable[[], int | None] = idle_cores,
        clock: Callable[[], float] = time.perf_counter,
        set_threads: Callable[[int], None] = torch.set_num_threads,
    ):
        self.candidates, self.pinned = list(candidates), pinned
        self.rounds, self.clear, self.drift, self.gap, self.span = rounds, clear, drift, gap, span
        self.look = look
        self.idle, self.clock, self.set_threads = idle, clock, set_threads
        self.recent: deque[float] = deque(maxlen=window)  # measurements since the probe
        self.chosen, self.reference = self.candidates[0], None  # the count, and its median step (s)
        self.probes = 0  # the choices made so far, measured or not
        self.since_probe, self.looked = 0, 0  # steps since the last choice, and that figure at the last look
        self.looked_at = 0.0  # the clock at the last look at the idle cores
        self.fitting = self.candidates  # the counts that fit in the cores idle at the last probe's start
        self.schedule: list[int] = []  # the counts still to measure in this probe, in order
        self.unchecked = False  # the choice was made after one round: the next probe, gap steps on, runs all
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
                if not self.schedule or self.clear_winner():
                    self.finish_probe()
        else:
            self.since_probe += 1
            measurement = self.measure(seconds)
            if measurement is not None:
                self.recent.append(measurement)
                if self.since_probe >= self.gap and (self.drifted() or self.unchecked or self.room_grew()):
                    self.start_probe()

    def measure(self, seconds: float) -> float | None:
        """The mean step of the steps gathered, once they cover `span` seconds; None while they do not."""
        self.pending.append(seconds)
        if sum(self.pending) < self.span:
            return None
        mean, self.pending = statistics.fmean(self.pending), []
        return mean

    def start_probe(self) -> None:
        """Measure the counts that fit in the idle cores, or choose the one that fits without measuring."""
        self.fitting = self.fits()
        self.measured, self.pending = {}, []
        self.looked, self.looked_at = 0, self.clock()
        if len(self.fitting) == 1:  # other processes run on the other cores
            self.schedule, self.unchecked = [], False
            self.choose(self.fitting[0], None)
        else:
            self.schedule = [c for _ in range(self.rounds) for c in self.fitting]  # interleaved: 1 2 1 2 …

    def fits(self) -> list[int]:
        """The candidates no larger than the cores idle now (all of them where that is not known), at least
        the smallest."""
        room = self.idle()
        return [c for c in self.candidates if room is None or c <= room] or self.candidates[:1]

    def room_grew(self) -> bool:
        """Whether more counts fit in the idle cores than at the last probe (another process ended); looked
        at while the count chosen is not the largest, at most once every `gap` steps and every `look`
        seconds. Cores that fill up show as drift: the chosen count's steps slow down."""
        if self.chosen == self.candidates[-1] or self.since_probe - self.looked < self.gap:
            return False
        if self.clock() - self.looked_at < self.look:
            return False
        self.looked, self.looked_at = self.since_probe, self.clock()
        return len(self.fits()) > len(self.fitting)

    def clear_winner(self) -> bool:
        """Whether, at the end of a round, one count's slowest measurement is `clear` times faster than
        every other count's fastest (never in a probe that checks an earlier choice)."""
        if self.unchecked or len(self.schedule) % len(self.fitting):  # a check, or mid-round
            return False
        slowest = {c: max(times) for c, times in self.measured.items()}
        best = min(slowest, key=slowest.get)
        return all(
            min(times) >= self.clear * slowest[best] for c, times in self.measured.items() if c != best
        )

    def finish_probe(self) -> None:
        self.unchecked, self.schedule = bool(self.schedule), []  # rounds left: the choice was made early
        medians = {c: statistics.median(times) for c, times in self.measured.items()}
        fastest = min(medians, key=medians.get)
        self.choose(fastest, medians[fastest])

    def choose(self, count: int, reference: float | None) -> None:
        """Run at `count` from now on; `reference`: its median step (s) when measured, watched for drift."""
        self.chosen, self.reference = count, reference
        self.probes += 1
        self.since_probe = 0
        self.recent.clear()
        self.use(count)

    def drifted(self) -> bool:
        """Whether the median of a full window of recent measurements is off the probe's by more than
        `drift`."""
        if self.reference is None or len(self.recent) < (self.recent.maxlen or 0):
            return False
        ratio = statistics.median(self.recent) / self.reference
        return ratio > 1 + self.drift or ratio < 1 / (1 + self.drift)

    @property
    def shown(self) -> str:
        """The count for a progress bar: `2`, `1 pinned`, or `probing` while a probe runs."""
        if self.pinned:
            return f"{self.chosen} pinned"
        return "probing" if self.schedule else str(self.chosen)

    def described(self) -> str:
        """The choice in words, for the line a run prints before its first step."""
        if self.pinned:
            return f"{self.chosen} ({self.pinned})"
        if len(self.candidates) == 1:
            return f"{self.chosen} (the only count this process can use)"
        counts = ", ".join(map(str, self.candidates))
        if len(self.fitting) == 1:  # chosen without measuring: other processes run on the other cores
            return (
                f"auto: {self.chosen}, the cores no other process is running on now ({counts} measured "
                "when more are idle)"
            )
        fitting = ", ".join(map(str, self.fitting))
        return (
            f"auto: measured over the first steps at {fitting}, again when the step time drifts or the "
            "idle cores change"
        )


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
