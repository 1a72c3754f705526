"""train.max_minutes: max_iters fitted to a time budget as the run goes (tinygpt.training.budget).

The runs here keep time by a clock that moves 1/8 s a training step and stands still otherwise, so a run
steps at exactly 8 a second and every figure below is exact, on any machine, however busy.
"""

import json

import pytest
import yaml
from conftest import tiny_raw, train

import tinygpt.training.loop as training_loop
from tinygpt.config.run_config import TrainSection, from_dict
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.training.budget import REFITS, Budget, resumed_max_iters

STEP_S = 0.125  # the clock's time a training step


@pytest.fixture
def step_clock(monkeypatch):
    """The training loop's clock, moved STEP_S by each step."""
    now = [1000.0]
    stepped = training_loop.Training.stepped

    def step_and_tick(self, *args):
        now[0] += STEP_S
        return stepped(self, *args)

    monkeypatch.setattr(training_loop, "clock", lambda: now[0])
    monkeypatch.setattr(training_loop.Training, "stepped", step_and_tick)
    return now


def budget_run(corpus_file, tmp_path, minutes: float, **train_settings):
    settings = dict(
        max_iters=10_000, max_minutes=minutes, eval_interval=100_000, eval_iters=2, log_interval=10
    )
    return from_dict(tiny_raw(corpus_file, tmp_path / "run", **(settings | train_settings)))


def metrics(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def test_a_run_with_a_budget_ends_at_it_with_its_decay_done(corpus_file, tmp_path, step_clock, capsys):
    record = train(budget_run(corpus_file, tmp_path, minutes=1))
    # 8 steps a second: the first check (step 10) starts the rate's clock; the fit at 6 s (step 50)
    # gives 50 + (60 - 6.25) × 8 = 480 steps, and every later fit the same
    assert record["step"] == 480 and record["wall_time_s"] == pytest.approx(60.0)
    last = metrics(tmp_path)[-1]
    assert last["step"] == 480 and last["lr"] == pytest.approx(
        tiny_raw(corpus_file, tmp_path)["train"]["min_lr"]
    )
    said = capsys.readouterr()
    said = said.out + said.err
    assert "time budget 1 min, 0.10 in at step 50: max_iters 10000 -> 480" in said
    assert said.count("time budget") == 1  # the later fits change nothing, and are not said
    saved = read_checkpoint(tmp_path / "run" / "last.pt")
    assert saved.run_section("train")["max_iters"] == 480  # the schedule the weights were trained on
    kept = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["train"]
    assert (kept["max_iters"], kept["max_minutes"]) == (10_000, 1.0)  # the run's config as asked for


def test_the_summary_says_the_budget(corpus_file, tmp_path, step_clock, capsys):
    train(budget_run(corpus_file, tmp_path, minutes=0.25), progress=False)
    out = capsys.readouterr().out
    assert "training: 0.25 minutes (train.max_minutes: max_iters fitted as it goes, ≤ 10000) of 8 × 16" in out


def test_max_iters_stays_the_most_steps(corpus_file, tmp_path, step_clock):
    record = train(budget_run(corpus_file, tmp_path, minutes=1, max_iters=200), progress=False)
    assert record["step"] == 200 and record["wall_time_s"] == pytest.approx(25.0)  # before the budget


def test_resumed_with_the_same_budget_a_finished_run_stays_finished(corpus_file, tmp_path, step_clock):
    train(budget_run(corpus_file, tmp_path, minutes=1), progress=False)
    record = train(budget_run(corpus_file, tmp_path, minutes=1), resume=True, progress=False)
    assert record["step"] == 480 and [m["step"] for m in metrics(tmp_path)][-1] == 480


def test_resumed_with_a_longer_budget_it_fits_afresh_at_the_whole_runs_rate(
    corpus_file, tmp_path, step_clock, capsys
):
    train(budget_run(corpus_file, tmp_path, minutes=1), progress=False)
    record = train(budget_run(corpus_file, tmp_path, minutes=2), resume=True, progress=False)
    # the first check (step 490, 61.25 s) fits at 8 a second: 490 + (120 - 61.25) × 8 = 960
    assert record["step"] == 960 and record["wall_time_s"] == pytest.approx(120.0)
    said = capsys.readouterr()
    assert "time budget 2 min, 1.02 in at step 490: max_iters 10000 -> 960" in said.out + said.err


def test_a_run_that_slows_down_ends_when_its_budget_is_spent(corpus_file, tmp_path, step_clock, monkeypatch):
    stepped = training_loop.Training.stepped

    def slower_after_300(self, step, *args):  # steps after 300 take 4 times as long
        step_clock[0] += 3 * STEP_S if step > 300 else 0.0
        return stepped(self, step, *args)

    monkeypatch.setattr(training_loop.Training, "stepped", slower_after_300)
    record = train(budget_run(corpus_file, tmp_path, minutes=1), progress=False)
    assert record["wall_time_s"] == pytest.approx(60.0, abs=10 * 4 * STEP_S)  # at the first check past it
    assert 300 < record["step"] < 480
    assert metrics(tmp_path)[-1]["step"] == record["step"]  # evaluated and saved where it ended


def test_a_budget_fits_at_its_shares_and_again_when_an_early_fit_was_too_short():
    t = TrainSection(max_iters=10_000, max_minutes=1, log_interval=10)
    budget = Budget.set_up(t, saved=None)
    assert budget.refits == [r * 60 for r in REFITS] and t.max_iters == 10_000
    assert budget.max_iters(10, 2.0, 10_000) == (10_000, False)  # the first check starts the rate's clock
    assert budget.max_iters(20, 3.0, 10_000) == (10_000, False)  # no share reached yet
    assert budget.max_iters(46, 6.5, 10_000) == (46 + 53.5 * 8, True)  # 36 steps in 4.5 s: 8 a second
    assert budget.max_iters(400, 10.0, 474) == (474, False)  # no share reached, and the end far off
    assert budget.max_iters(406, 11.0, 410) == (406 + 49 * 80, True)  # would end at 1/5: fitted again
    assert budget.max_iters(10_000, 12.0, 10_000) == (10_000, False)  # the configured most: not fitted on
    assert budget.max_iters(500, 61.0, 4_510) == (500, True)  # spent: ends at this step
    assert Budget.set_up(TrainSection(), None) is None  # no budget


class Saved:
    """A last.pt, as far as a budget reads it: its config's train section."""

    def __init__(self, train: dict | None):
        self.train = train

    def run_section(self, section: str) -> dict | None:
        return self.train


def test_a_resumed_run_goes_on_with_its_fitted_max_iters_or_fits_at_once_under_another_budget():
    t = TrainSection(max_minutes=2, max_iters=9000)
    assert resumed_max_iters(t, {"max_minutes": 2, "max_iters": 480}) == 480
    assert resumed_max_iters(t, {"max_minutes": 2, "max_iters": 20_000}) == 9000  # within the config's
    assert resumed_max_iters(t, {"max_minutes": 1, "max_iters": 480}) is None  # another budget: fit afresh
    assert resumed_max_iters(t, {"max_iters": 480}) is None and resumed_max_iters(t, None) is None

    same = Budget.set_up(t, Saved({"max_minutes": 2, "max_iters": 480}))
    assert t.max_iters == 480 and same.most_steps == 9000  # goes on with it, within the configured most
    assert same.max_iters(490, 61.0, 480) == (480, False)  # the first check: the clock, the shares behind
    assert same.refits == [0.6 * 120, 0.85 * 120]

    t = TrainSection(max_minutes=2, max_iters=9000)
    other = Budget.set_up(t, Saved({"max_minutes": 1, "max_iters": 480}))
    assert t.max_iters == 9000 and other.fitted_at == (0, 0.0)  # at once, at the whole run's rate
    assert other.max_iters(490, 61.5, 9000) == (490 + int(58.5 * 490 / 61.5), True)
