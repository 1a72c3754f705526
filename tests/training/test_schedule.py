"""train.lr_schedule: the learning rate at each step, cosine or warm-up-stable-decay (wsd)."""

import json

import pytest
from conftest import tiny_raw

from tinygpt.config.run_config import TrainSection, from_dict
from tinygpt.errors import UserError
from tinygpt.training.loop import train
from tinygpt.training.step import lr_at


def test_wsd_holds_the_peak_then_falls_in_a_straight_line_to_min_lr():
    t = TrainSection(
        lr_schedule="wsd", max_iters=100, warmup_iters=10, learning_rate=1e-2, min_lr=0.0, decay_fraction=0.3
    )
    assert lr_at(0, t) < lr_at(9, t) < t.learning_rate  # the warm-up, as for cosine
    assert [lr_at(s, t) for s in (10, 40, 70)] == [t.learning_rate] * 3  # stable up to the last 30
    assert lr_at(85, t) == pytest.approx(0.5 * t.learning_rate)  # halfway down the decay
    drops = [lr_at(s, t) - lr_at(s + 1, t) for s in range(70, 99)]
    assert drops == pytest.approx([t.learning_rate / 30] * 29)  # one straight line
    assert lr_at(100, t) == 0.0 and lr_at(99, t) > 0.0  # min_lr when the steps run out


def test_cosine_stays_the_default():
    t = TrainSection(max_iters=100, warmup_iters=10, learning_rate=1e-2, min_lr=1e-3)
    assert t.lr_schedule == "cosine"
    assert lr_at(55, t) == pytest.approx(0.5 * (1e-2 + 1e-3))  # halfway along the cosine
    assert lr_at(70, t) < t.learning_rate  # where wsd would still hold the peak


@pytest.mark.parametrize(
    ("train_keys", "error"),
    [
        (dict(lr_schedule="linear"), "train.lr_schedule"),
        (dict(lr_schedule="wsd", decay_fraction=0.0), "train.decay_fraction"),
        (dict(lr_schedule="wsd", decay_fraction=1.5), "train.decay_fraction"),
        (dict(lr_schedule="wsd", decay_fraction=0.95), "overlaps the 5 warm-up steps"),  # 57 of 60 steps
    ],
)
def test_a_bad_schedule_is_a_config_error(corpus_file, tmp_path, train_keys, error):
    with pytest.raises(UserError, match=error):
        from_dict(tiny_raw(corpus_file, tmp_path, **train_keys))


def test_training_logs_the_wsd_rate_it_steps_with(corpus_file, tmp_path):
    raw = tiny_raw(corpus_file, tmp_path / "run", lr_schedule="wsd", min_lr=0.0, decay_fraction=0.5)
    train(from_dict(raw), progress=False)
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rates = {row["step"]: row["lr"] for row in logged}
    assert rates[20] == pytest.approx(3e-3)  # stable: the decay is the last 30 of 60 steps
    assert rates[40] == pytest.approx(3e-3 * 20 / 30)  # 10 steps into it


def test_a_warm_up_longer_than_the_run_is_warned_of_and_the_run_goes_on(corpus_file, tmp_path, capsys):
    """min_lr above learning_rate is refused; a warm-up the run never finishes is legal but surely
    not meant: one warning line, and the run trains with the rate the warning names."""
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=10, eval_interval=10, warmup_iters=99)
    train(from_dict(raw), progress=False)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: train.warmup_iters = 99 is not below train.max_iters = 10: the learning rate only warms "
        "up, to 3.00e-04 of train.learning_rate's 3.00e-03, and never decays; lower train.warmup_iters "
        "(nanoGPT warms up for 2-10% of the steps)"
    ]
    assert lr_at(9, from_dict(raw).train) == pytest.approx(3e-4)  # the rate of the last step, as said
    assert (tmp_path / "run" / "best.pt").is_file()


def test_a_warm_up_shorter_than_the_run_is_not_warned_of(corpus_file, tmp_path, capsys):
    train(from_dict(tiny_raw(corpus_file, tmp_path / "run", max_iters=10, eval_interval=10)), progress=False)
    assert "warning:" not in capsys.readouterr().err
