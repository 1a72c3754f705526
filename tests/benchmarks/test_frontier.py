"""benchmarks/frontier.py: the recipe per budget, and a run's schedule fitted again to its rate."""

import torch
from conftest import load_benchmark

from tinygpt.config.run_config import TrainSection
from tinygpt.training.step import lr_at


def test_refit_sets_the_steps_that_fit_and_the_schedule_follows():
    frontier = load_benchmark("frontier")
    schedule = TrainSection(max_iters=1000, warmup_iters=10, learning_rate=1e-2, min_lr=1e-3)
    run = frontier.Run("tinygpt 1 min", None, None, 1000, 64, step=90, seconds=9.0, schedule=schedule)
    before = lr_at(500, schedule)
    frontier.refit(run, budget_s=60.0)  # 10 steps a second: 90 run and 510 to come, 499 with the margin
    assert run.max_iters == schedule.max_iters == 90 + int(frontier.MARGIN * 510)
    assert lr_at(run.max_iters, schedule) == schedule.min_lr  # the decay now ends at the new last step
    assert lr_at(500, schedule) < before


def test_refit_never_ends_the_schedule_before_the_step_reached():
    frontier = load_benchmark("frontier")
    schedule = TrainSection(max_iters=1000, warmup_iters=10)
    run = frontier.Run("tinygpt 1 min", None, None, 1000, 64, step=90, seconds=59.0, schedule=schedule)
    frontier.refit(run, budget_s=60.0)
    assert run.max_iters == 91


def test_a_later_refit_follows_the_rate_since_the_one_before():
    """A machine that slowed down: 10 steps a second for the first 30 s, 5 since."""
    frontier = load_benchmark("frontier")
    schedule = TrainSection(max_iters=600, warmup_iters=10)
    run = frontier.Run("tinygpt 1 min", None, None, 600, 64, step=350, seconds=40.0, schedule=schedule)
    frontier.refit(run, budget_s=60.0, since=(300, 30.0))  # 20 s left at 5 a second: 100 steps
    assert run.max_iters == 350 + int(frontier.MARGIN * 100)


def test_the_30_minute_recipe_is_cut_to_4_layers_only_where_it_runs_in_float32(monkeypatch):
    frontier = load_benchmark("frontier")
    cpu = torch.device("cpu")
    cut = ["model.n_layer=4", "model.attention_dropout=false"]  # configs/cpu_large_float32.yaml's shape
    for dtype, shape in (("float32", cut), ("bfloat16", [])):
        monkeypatch.setattr(frontier, "resolve_dtype", lambda name, device, dtype=dtype: dtype)
        assert frontier.recipe_for(30, cpu)[::2] == ("configs/cpu_large.yaml", shape)
        assert frontier.recipe_for(15, cpu)[::2] == ("configs/cpu_long.yaml", [])
    assert frontier.recipe_for(1, cpu)[0] == "configs/cpu_quick.yaml"
    assert frontier.recipe_for(5, cpu)[0] == "configs/cpu.yaml"


def test_a_run_without_dropout_is_fitted_to_at_most_10m_characters():
    frontier = load_benchmark("frontier")
    cpu_long = frontier.load_config("configs/cpu_long.yaml")  # 24 windows of 128 a step, no dropout
    assert frontier.most_steps(cpu_long) == 10_000_000 // (24 * 128) == 3255
    assert frontier.most_steps(frontier.load_config("configs/cpu_large.yaml")) is None  # dropout 0.1
    schedule = TrainSection(max_iters=3000, warmup_iters=10, learning_rate=1e-2, min_lr=1e-3)
    run = frontier.Run("tinygpt 15 min", None, None, 3000, 64, step=1000, seconds=100.0, schedule=schedule)
    run.most_steps = 3255
    frontier.refit(run, budget_s=900.0)  # 10 steps a second would fit 7,800 more
    assert run.max_iters == schedule.max_iters == 3255
