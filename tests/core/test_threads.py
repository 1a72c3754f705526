"""tinygpt.threads: the count whose steps are fastest, measured on the steps themselves, and pins."""

import os
import subprocess
import sys
import time

import pytest
import torch

import tinygpt.threads as threads_module
from tinygpt.config.run_config import from_dict
from tinygpt.errors import UserError
from tinygpt.threads import Threads, most_threads, threads_for, threads_value

CPU = torch.device("cpu")


class Machine:
    """A fake machine: a step takes `cost[threads]` seconds of its clock, at the count last set."""

    def __init__(self, cost: dict[int, float]):
        self.cost, self.now, self.threads, self.sets = dict(cost), 0.0, torch.get_num_threads(), []
        self.stall = 0.0  # added to the next step only: the step descheduled for a while

    def clock(self) -> float:
        return self.now

    def set_threads(self, count: int) -> None:
        self.threads = count
        self.sets.append(count)

    def step(self) -> int:
        self.now += self.cost[self.threads] + self.stall
        self.stall = 0.0
        return self.threads


def unpinned(monkeypatch) -> None:
    """No thread count in the environment (the tests themselves may run under OMP_NUM_THREADS=1)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def chooser(machine: Machine, candidates=(1, 2), **options) -> Threads:
    """Threads on the fake machine; the idle cores not known (every candidate measured) unless given."""
    options.setdefault("idle", lambda: None)
    return Threads(candidates, clock=machine.clock, set_threads=machine.set_threads, **options)


def run_steps(threads: Threads, machine: Machine, n: int) -> list[int]:
    """The thread count each of n steps ran at."""
    return [threads.run(machine.step) for _ in range(n)]


@pytest.mark.parametrize("cost, fastest", [({1: 0.08, 2: 0.12}, 1), ({1: 0.1, 2: 0.07}, 2)])
def test_the_first_steps_measure_each_count_in_turn_and_the_rest_run_at_the_fastest(cost, fastest):
    machine = Machine(cost)
    threads = chooser(machine, rounds=3)
    assert threads.shown == "probing"
    ran = run_steps(threads, machine, 20)
    assert ran[:7] == [1, 1, 2, 1, 2, 1, 2]  # a warm-up step, then interleaved: 1 2 1 2 1 2
    assert set(ran[7:]) == {fastest}
    assert threads.shown == str(fastest) and threads.probes == 1


@pytest.mark.parametrize("cost, fastest", [({1: 0.08, 2: 0.12}, 1), ({1: 0.1, 2: 0.07}, 2)])
def test_each_times_the_loop_body_as_a_step_and_hands_the_items_over_in_order(cost, fastest):
    """A loop `for i in threads.each(items)`: each body runs at the count run would call fn at."""
    machine = Machine(cost)
    threads = chooser(machine, rounds=3)
    seen, ran = [], []
    for item in threads.each(range(20, 0, -1)):
        seen.append(item)
        ran.append(machine.step())
    assert seen == list(range(20, 0, -1))
    assert ran[:7] == [1, 1, 2, 1, 2, 1, 2] and set(ran[7:]) == {fastest}
    assert threads.probes == 1


def test_each_with_one_candidate_measures_nothing():
    machine = Machine({1: 0.1})
    threads = chooser(machine, candidates=[1])
    assert list(threads.each("abc")) == ["a", "b", "c"] and threads.probes == 0


@pytest.mark.parametrize("cost, fastest", [({1: 0.08, 2: 0.2}, 1), ({1: 0.3, 2: 0.1}, 2)])
def test_a_count_clearly_faster_after_one_round_ends_the_probe_and_a_whole_probe_checks_it_later(
    cost, fastest
):
    machine = Machine(cost)
    threads = chooser(machine, rounds=3, window=10, gap=50)
    ran = run_steps(threads, machine, 3)
    assert ran == [1, 1, 2] and threads.chosen == fastest  # warm-up, 1, 2: 2.5x or 3x apart, so no more
    ran = run_steps(threads, machine, 50)
    assert set(ran[:49]) == {fastest} and threads.probes == 1
    ran = run_steps(threads, machine, 6)  # gap steps on: all three rounds, even though as clear
    assert ran == [1, 2, 1, 2, 1, 2] and threads.probes == 2 and threads.chosen == fastest
    assert set(run_steps(threads, machine, 200)) == {fastest} and threads.probes == 2  # checked: no more


def test_a_step_descheduled_in_the_first_round_decides_only_until_the_check():
    machine = Machine({1: 0.1, 2: 0.05})
    threads = chooser(machine, rounds=3, window=10, gap=50)
    run_steps(threads, machine, 2)  # the warm-up and the first at 1
    machine.stall = 10  # the next step (at 2) is interrupted for 10 s: 2 threads look 200x slower
    run_steps(threads, machine, 1)
    assert threads.chosen == 1
    run_steps(threads, machine, 60)  # gap steps at 1, then the check: 1 2 1 2 1 2
    assert threads.chosen == 2 and threads.probes == 2


def test_one_slow_step_after_the_first_round_does_not_decide_the_probe():
    """The median of each count's measurements: a step descheduled once (10 s) is outvoted."""
    machine = Machine({1: 0.1, 2: 0.05})
    threads = chooser(machine, rounds=3)
    run_steps(threads, machine, 4)  # the warm-up, 1, 2, 1
    machine.stall = 10  # the next step (at 2) is interrupted for 10 s
    run_steps(threads, machine, 3)
    assert threads.chosen == 2 and threads.probes == 1


class BusyMachine(Machine):
    """Short steps on a core another process shares: at 2 threads most take 0.3 ms, but every tenth
    waits 20 ms for the thread the other process holds (mean 2.3 ms); 1 thread: 0.5 ms each."""

    def step(self) -> int:
        self.count = getattr(self, "count", 0) + 1
        stalled = self.threads == 2 and self.count % 10 == 0
        self.now += 0.0005 if self.threads == 1 else (0.02 if stalled else 0.0003)
        return self.threads


def test_short_steps_are_measured_over_a_span_that_takes_in_the_stalls():
    machine = BusyMachine({})
    ran = run_steps(chooser(machine, rounds=3, span=0.025), machine, 2000)
    assert set(ran[-1000:]) == {1}  # a step's median (0.3 ms at 2) would have chosen 2
    at_two = [i for i, count in enumerate(ran) if count == 2]
    assert len(at_two) > 3  # each measurement at 2 ran steps in a row until 25 ms had passed
    machine = BusyMachine({})
    assert set(run_steps(chooser(machine, rounds=3, span=0.0), machine, 200)[-100:]) == {2}  # one step each


def test_stalls_that_start_after_the_probe_are_seen_as_drift_though_most_steps_stay_fast():
    machine = Machine({1: 0.0005, 2: 0.0003})  # idle: 2 threads win
    threads = chooser(machine, rounds=3, span=0.01, window=10, gap=50)
    run_steps(threads, machine, 500)
    assert threads.chosen == 2 and threads.probes == 1
    busy = BusyMachine({})  # another process starts: one step in ten at 2 threads now waits 20 ms
    busy.threads = machine.threads
    threads.clock, threads.set_threads = busy.clock, busy.set_threads
    ran = run_steps(threads, busy, 3000)
    assert threads.probes == 3 and threads.chosen == 1 and set(ran[-1000:]) == {1}  # drift, then its check


def test_counts_that_do_not_fit_in_the_idle_cores_are_never_tried():
    machine = Machine({1: 0.1, 2: 0.07, 3: 0.04})
    threads = chooser(machine, candidates=(1, 2, 3), idle=lambda: 2)  # a third core runs another process
    assert threads.described().startswith("auto: measured over the first steps at 1, 2, again")
    ran = run_steps(threads, machine, 20)
    assert ran[:7] == [1, 1, 2, 1, 2, 1, 2] and set(ran[7:]) == {2}
    machine = Machine({1: 0.2, 2: 0.05, 3: 0.04})
    ran = run_steps(chooser(machine, candidates=(1, 2, 3), idle=lambda: 2), machine, 10)
    assert ran == [1, 1, 2] + [2] * 7  # of the two that fit, 2 is 4x faster after a round: no more rounds
    machine = Machine({1: 0.1, 2: 0.05})
    threads = chooser(machine, idle=lambda: 1)  # one core idle: 1 thread, nothing measured
    assert threads.shown == "1" and threads.probes == 1
    assert set(run_steps(threads, machine, 300)) == {1} and threads.probes == 1
    assert threads.described() == (
        "auto: 1, the cores no other process is running on now (1, 2 measured when more are idle)"
    )


def test_more_idle_cores_measure_the_counts_again_and_fewer_show_as_drift():
    machine, idle = Machine({1: 0.1, 2: 0.07}), [1]
    threads = chooser(machine, idle=lambda: idle[0], window=10, gap=50)
    assert set(run_steps(threads, machine, 100)) == {1}
    idle[0] = 2  # the other process ended
    ran = run_steps(threads, machine, 60)
    assert threads.probes == 2 and threads.chosen == 2 and [1, 2, 1, 2, 1, 2] == ran[ran.index(2) - 1 :][:6]
    idle[0] = 0  # two other processes start: no core idle, 1 thread still fits (the least there is)
    machine.cost = {1: 0.1, 2: 0.4}  # and 2 threads slow down: drift, then the look at the probe's start
    ran = run_steps(threads, machine, 80)
    assert threads.probes == 3 and threads.chosen == 1 and threads.shown == "1"
    assert set(ran[ran.index(1) :]) == {1}  # chosen without measuring 2 again


def test_at_the_most_threads_the_idle_cores_are_looked_at_only_when_a_probe_starts():
    """Looking costs a few milliseconds; at the largest count, more idle cores could change nothing."""
    machine, looks = Machine({1: 0.1, 2: 0.07}), []
    threads = chooser(machine, idle=lambda: looks.append(1) or 2, window=10, gap=50)
    run_steps(threads, machine, 1000)
    assert threads.chosen == 2 and threads.probes == 1 and len(looks) == 1


def test_the_idle_cores_are_the_machines_less_the_other_processes_running():
    """procs_running counts every thread running or waiting to run; this process's own are not others."""
    cores = threads_module.idle_cores()
    if cores is None:
        pytest.skip("not Linux, or this process may use only some of the CPUs")
    assert 1 <= cores + 1 and cores <= os.cpu_count()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # started: it is running or waiting to run from now on
        assert max(threads_module.idle_cores() for _ in range(5)) <= os.cpu_count() - 1
    finally:
        spinner.kill()
        spinner.wait()


def test_the_idle_cores_are_not_known_where_this_process_may_use_only_some_cpus(monkeypatch):
    monkeypatch.setattr(threads_module, "usable_cores", lambda: (os.cpu_count() or 1) + 1)
    assert threads_module.idle_cores() is None


def test_a_measurement_spans_consecutive_steps_and_counts_their_mean():
    machine = Machine({1: 2**-8, 2: 2**-10})  # seconds a step, exact in binary: no rounding in the sums
    threads = chooser(machine, rounds=1, span=10 * 2**-10)
    ran = run_steps(threads, machine, 1 + 3 + 10 + 5)
    assert ran == [1] + [1] * 3 + [2] * 10 + [2] * 5  # warm-up; 3 steps reach the span at 1, 10 at 2
    assert threads.measured == {1: [2**-8], 2: [2**-10]} and threads.chosen == 2


def test_a_drift_in_the_step_time_measures_again_and_a_steady_one_never_does():
    machine = Machine({1: 0.08, 2: 0.06})
    threads = chooser(machine, rounds=3, window=10, drift=0.3, gap=50)
    run_steps(threads, machine, 300)  # steady: the first probe only
    assert threads.probes == 1 and threads.chosen == 2
    machine.cost = {1: 0.09, 2: 0.25}  # another job takes a core: 2 threads get slow
    ran = run_steps(threads, machine, 20)
    assert threads.probes == 2 and threads.chosen == 1
    again = ran.index(1)  # the window's median moved, then both counts were measured again
    assert again <= 10 and ran[again : again + 2] == [1, 2] and set(ran[again + 2 :]) == {1}  # 2.8x: clear
    run_steps(threads, machine, 300)  # gap steps on, the early choice checked by all three rounds
    assert threads.probes == 3 and threads.chosen == 1
    run_steps(threads, machine, 300)  # steady at the new speed: no more probes
    assert threads.probes == 3


def test_probes_are_at_least_gap_steps_apart():
    machine = Machine({1: 0.1, 2: 0.05})
    threads = chooser(machine, rounds=1, window=5, gap=100)
    run_steps(threads, machine, 3)  # warm-up, 1, 2: chosen 2
    machine.cost = {1: 0.1, 2: 0.5}  # drifted at once, but the last probe was 0 steps ago
    run_steps(threads, machine, 99)
    assert threads.probes == 1
    run_steps(threads, machine, 3)
    assert threads.probes == 2 and threads.chosen == 1


def test_the_count_torch_had_is_put_back_after_the_with_block():
    machine = Machine({1: 0.1, 2: 0.05})
    before = torch.get_num_threads()
    with chooser(machine, rounds=1) as threads:
        run_steps(threads, machine, 5)
    assert machine.sets[-1] == before


def test_a_count_pins_it_and_nothing_is_measured():
    machine = Machine({1: 0.1, 2: 0.05})
    threads = threads_for(1, "train.threads", CPU, clock=machine.clock, set_threads=machine.set_threads)
    assert run_steps(threads, machine, 10) == [1] * 10
    assert threads.shown == "1 pinned" and threads.described() == "1 (train.threads 1)"


@pytest.mark.parametrize("variable", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_the_environment_pins_auto_at_torchs_count(monkeypatch, variable):
    unpinned(monkeypatch)
    monkeypatch.setenv(variable, "1")
    machine = Machine({1: 0.1, 2: 0.05, torch.get_num_threads(): 0.1})
    threads = threads_for("auto", "train.threads", CPU, clock=machine.clock, set_threads=machine.set_threads)
    assert threads.candidates == [torch.get_num_threads()]
    assert threads.described().endswith(f"({variable}=1)") and threads.shown.endswith("pinned")


def test_a_number_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads_for(1, "--threads", CPU, set_threads=lambda n: None).candidates == [1]


def test_auto_under_torchrun_or_off_the_cpu_keeps_torchs_count(monkeypatch):
    unpinned(monkeypatch)
    count = torch.get_num_threads()
    ranks = threads_for("auto", "train.threads", CPU, "under torchrun", set_threads=lambda n: None)
    cuda = threads_for("auto", "train.threads", torch.device("cuda"), set_threads=lambda n: None)
    assert ranks.candidates == cuda.candidates == [count]
    assert ranks.described() == f"{count} (under torchrun)" and cuda.described() == f"{count} (on cuda)"


def test_auto_chooses_among_one_to_the_cores_torch_would_use(monkeypatch):
    unpinned(monkeypatch)
    threads = threads_for("auto", "train.threads", CPU, set_threads=lambda n: None)
    assert threads.candidates == list(range(1, most_threads() + 1))
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a program that asked torch for one thread gets one: nothing to measure
    try:
        assert threads_for("auto", "train.threads", CPU).candidates == [1]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("value", [0, -1, "many", True, 1.5, ""])
def test_a_thread_count_that_is_not_auto_or_a_whole_number_is_refused_in_one_line(value):
    with pytest.raises(UserError) as caught:
        from_dict({"train": {"threads": value}})
    assert str(caught.value) == (
        f"config: train.threads = {value!r} is not allowed; train.threads must be auto or an integer ≥ 1"
    )
    with pytest.raises(UserError) as caught:
        threads_value(value, "--threads")
    assert str(caught.value) == (
        f"--threads {value} is not allowed; use auto or a whole number ≥ 1 (the CPU threads to use)"
    )


def test_a_count_above_the_cores_this_process_can_use_is_refused(monkeypatch):
    monkeypatch.setattr(threads_module, "usable_cores", lambda: 2)
    with pytest.raises(UserError) as caught:
        threads_for(3, "train.threads", CPU, set_threads=lambda n: None)
    assert str(caught.value) == (
        "train.threads 3 is more than the 2 CPU(s) this process can use; use auto, or a count from 1 to 2"
    )
    assert threads_for(2, "--threads", CPU, set_threads=lambda n: None).candidates == [2]


def test_auto_and_whole_numbers_are_taken_from_a_config_and_a_command_line():
    assert from_dict({}).train.threads == "auto"
    assert from_dict({"train": {"threads": 3}}).train.threads == 3
    assert [threads_value(v, "--threads") for v in ("auto", "2", 2)] == ["auto", 2, 2]
