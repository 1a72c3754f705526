"""A NaN or infinite loss stops training with its step named, before any checkpoint can hold bad weights."""

import math
import signal
from pathlib import Path

import pytest
import torch
from conftest import train

import tinygpt.training.set_up as training_setup  # where the step and the corpus are set up
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.metrics import read_metrics
from tinygpt.model import GPT
from tinygpt.training.divergence import LossWatch

pytestmark = pytest.mark.usefixtures("one_thread", "ctrl_c_handled")


def test_loss_watch_names_the_first_non_finite_step_since_the_last_check():
    watch = LossWatch(5, torch.device("cpu"), last_checked=10)
    for step, loss in zip(range(11, 16), [2.0, 1.9, math.inf, math.nan, 1.8], strict=True):
        watch.add(step, torch.tensor(loss))
    assert watch.check(15) == (13, math.inf)
    for step in range(16, 19):
        watch.add(step, torch.tensor(1.5))
    assert watch.check(18) is None  # only the steps since the last check count
    assert watch.check(18) is None  # nothing new


def nan_loss_at(monkeypatch, bad_step: int) -> None:
    """The training loss of step bad_step (counting from 1) is NaN, and so its gradients."""
    real = GPT.forward
    calls = []

    def forward(self, idx, targets=None, **kw):
        logits, loss = real(self, idx, targets, **kw)
        if self.training and targets is not None:
            calls.append(1)
            if len(calls) == bad_step:
                loss = loss * math.nan
        return logits, loss

    monkeypatch.setattr(GPT, "forward", forward)


def assert_finite_checkpoint(path: Path, step: int) -> None:
    saved = read_checkpoint(path)
    assert saved.record["step"] == step
    assert all(torch.isfinite(w).all() for w in saved.weights.values())


@pytest.mark.parametrize(
    "bad_step, kept",
    [(23, 20), (20, 0)],  # last.pt is saved at step 0's evaluation too
    ids=["after-a-checkpoint", "at-the-first-checkpoint"],
)
def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(
    tiny_config, monkeypatch, bad_step, kept
):
    nan_loss_at(monkeypatch, bad_step)  # log_interval 5, eval_interval 20
    message = (
        rf"training diverged: the loss was nan at step {bad_step}; lower train.learning_rate \(now 0.003\)"
    )
    with pytest.raises(UserError, match=message) as e:
        train(tiny_config, progress=False)
    run = Path(tiny_config.out_dir)
    assert f"last.pt still holds step {kept}, to --resume from" in str(e.value)
    assert_finite_checkpoint(run / "last.pt", kept)
    assert_finite_checkpoint(run / "best.pt", kept)
    assert [m["step"] for m in read_metrics(run / "metrics.jsonl")] == [0, 20][: 2 if kept else 1]
    assert not (run / "lock").exists()


@pytest.mark.parametrize(
    "bad_step, interrupt, message",
    [
        (20, False, r"the evaluation at step 20 gave losses \{'train': nan"),
        (33, True, r"the weights are no longer finite at step 33"),
    ],
    ids=["caught-by-the-evaluation", "caught-before-the-interrupt-save"],
)
def test_weights_ruined_by_a_step_with_a_finite_loss_are_never_saved(
    tiny_config, monkeypatch, bad_step, interrupt, message
):
    """An infinite learning rate in one step: its own loss is finite, the weights after it are not."""
    real = training_setup.lr_at

    def lr_at(s, t):
        if s == bad_step - 1:
            if interrupt:
                signal.raise_signal(signal.SIGINT)
            return math.inf
        return real(s, t)

    monkeypatch.setattr(training_setup, "lr_at", lr_at)
    with pytest.raises(UserError, match=message):
        train(tiny_config, progress=False)
    run = Path(tiny_config.out_dir)
    assert_finite_checkpoint(run / "last.pt", 20 if bad_step > 20 else 0)  # the last evaluation's, finite


def test_a_log_interval_longer_than_the_run_needs_no_buffer_of_its_size(tiny_config):
    """The NaN watch keeps the losses between checks, and evaluations check too: 2^63 − 1 is fine."""
    tiny_config.train.log_interval = 2**63 - 1
    record = train(tiny_config, progress=False)
    assert record["step"] == tiny_config.train.max_iters
