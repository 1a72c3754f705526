"""Ctrl-C and SIGTERM during training: finish the step, save last.pt, stop with 130 or 143.

Signals are real (signal.raise_signal), sent from inside the training loop at
the end of a chosen step.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_raw, train

import tinygpt.training.set_up as training_setup  # where the step and the corpus are set up
from tinygpt.config.run_config import from_dict
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.metrics import read_metrics
from tinygpt.files.snapshots import read_timeline
from tinygpt.training.divergence import LossWatch
from tinygpt.training.interrupt import Interrupted, StopRequest

pytestmark = pytest.mark.usefixtures("one_thread", "ctrl_c_handled")
ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def signal_during_step(monkeypatch, step: int, signum: int = signal.SIGINT, times: int = 1) -> None:
    """Send `times` signals as the loop finishes step `step` (counting from 1).

    They come from LossWatch.add, which the loop calls once at the end of every training step.
    """
    real = LossWatch.add

    def add(self, done: int, loss) -> None:
        real(self, done, loss)
        if done == step:
            for _ in range(times):
                signal.raise_signal(signum)

    monkeypatch.setattr(LossWatch, "add", add)


def test_stop_request_sets_a_flag_then_stops_at_once_and_restores_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        with pytest.raises(Interrupted, match="before training began") as early:
            signal.raise_signal(signal.SIGINT)  # not armed yet: nothing to save, stop now
        assert early.value.exit_code == 130
        stop.arm()
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested and stop.signum == signal.SIGTERM
        with pytest.raises(Interrupted, match="at once by a second SIGINT") as second:
            signal.raise_signal(signal.SIGINT)
        assert second.value.exit_code == 130
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_the_process_was_started_to_ignore_stays_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as for `python scripts/train.py … &` in a script
    with StopRequest() as stop:
        stop.arm()
        signal.raise_signal(signal.SIGINT)
        assert not stop.requested
        signal.raise_signal(signal.SIGTERM)  # the other one still stops the run
        assert stop.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


# ------------------------------------------------------------------ exact resume


def comparable(run) -> dict:
    """Everything a run leaves that must not depend on whether it was interrupted."""
    last, best = read_checkpoint(run / "last.pt"), read_checkpoint(run / "best.pt")
    record = {k: last.record[k] for k in ("step", "tokens_seen", "best_val_loss", "best_step")}
    record |= {k: last.record[k] for k in ("train_loss", "val_loss")}
    metrics = [{k: v for k, v in m.items() if k != "time_s"} for m in read_metrics(run / "metrics.jsonl")]
    return {
        "model": last.weights,
        "optimizer": last.optimizer,
        "rng": last.rng,
        "best": best.weights,
        "record": record,
        "metrics": metrics,
        "timeline": read_timeline(run / "timeline.jsonl"),  # the snapshots too, bit for bit
    }


def assert_identical(a, b, where="") -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_identical(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def exact_raw(corpus, out_dir) -> dict:
    """60 steps with the real cosine schedule (max_iters shapes it) and dropout (the torch RNG matters)."""
    raw = tiny_raw(corpus, out_dir, max_iters=60, warmup_iters=5)
    raw["model"]["dropout"] = 0.1
    return raw


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    from conftest import make_corpus

    root = tmp_path_factory.mktemp("straight")
    corpus = root / "corpus.txt"
    corpus.write_text(make_corpus())
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the tests: bit-identical needs the same reduction order
    train(from_dict(exact_raw(corpus, root / "run")), progress=False)
    torch.set_num_threads(before)
    return corpus, comparable(root / "run")


@pytest.mark.parametrize(
    "stop_at, signum",
    [(33, signal.SIGINT), (40, signal.SIGTERM)],
    ids=["between-evaluations-sigint", "at-an-evaluation-sigterm"],
)
def test_interrupt_then_resume_is_bit_identical_to_one_run(
    straight_run, tmp_path, monkeypatch, stop_at, signum
):
    corpus, expected = straight_run
    config = from_dict(exact_raw(corpus, tmp_path / "run"))
    signal_during_step(monkeypatch, stop_at, signum)
    with pytest.raises(Interrupted, match=f"stopped by {signal.Signals(signum).name} at step {stop_at}") as e:
        train(config, progress=False)
    assert e.value.exit_code == 128 + signum
    assert read_checkpoint(tmp_path / "run" / "last.pt").record["step"] == stop_at
    assert not (tmp_path / "run" / "lock").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.undo()

    record = train(config, resume=True, progress=False)  # the same config: the same cosine schedule
    assert record["step"] == 60
    assert_identical(comparable(tmp_path / "run"), expected)


def test_a_signal_during_a_long_step_drops_it_and_resumes_exactly(tmp_path, monkeypatch, capfd):
    """With train.grad_accum_steps micro-batches a step, Ctrl-C need not wait for the step's end: the
    step in progress is dropped at its next micro-batch, the one before it saved (as the notice says),
    and resuming from there gives what a run never stopped gives, bit for bit."""
    from conftest import make_corpus

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(make_corpus())

    def config(name: str):
        raw = tiny_raw(corpus, tmp_path / name, max_iters=16, warmup_iters=2, eval_interval=8)
        raw["train"]["grad_accum_steps"] = 3
        raw["model"]["dropout"] = 0.1  # the torch random state matters too
        return from_dict(raw)

    train(config("straight"), progress=False)
    real, calls = training_setup.train_step, []

    def train_step(*args, abandon):
        calls.append(0)
        if len(calls) != 12:
            return real(*args, abandon=abandon)
        batches, sampled = args[3], []

        class SignalledMidStep:  # step 12's batches: the signal comes as its second micro-batch is drawn
            def sample(self, generator):
                sampled.append(0)
                if len(sampled) == 2:
                    signal.raise_signal(signal.SIGINT)
                return batches.sample(generator)

        return real(*args[:3], SignalledMidStep(), *args[4:], abandon=abandon)

    monkeypatch.setattr(training_setup, "train_step", train_step)
    with pytest.raises(Interrupted, match="stopped by SIGINT at step 11") as e:
        train(config("stopped"), progress=False)
    assert e.value.exit_code == 130 and len(calls) == 12
    assert read_checkpoint(tmp_path / "stopped" / "last.pt").record["step"] == 11
    notice = "SIGINT: saving the last whole step to last.pt, then stopping (Ctrl-C again stops at once)"
    assert capfd.readouterr().err.count(notice) == 1
    monkeypatch.undo()

    assert train(config("stopped"), resume=True, progress=False)["step"] == 16
    assert_identical(comparable(tmp_path / "stopped"), comparable(tmp_path / "straight"))


def test_a_second_signal_stops_at_once_and_keeps_the_last_checkpoint(tiny_config, monkeypatch):
    run = tiny_config.out_dir
    signal_during_step(monkeypatch, 27, times=2)
    with pytest.raises(Interrupted, match="at once by a second SIGINT") as e:
        train(tiny_config, progress=False)
    assert e.value.exit_code == 130
    assert read_checkpoint(f"{run}/last.pt").record["step"] == 20  # the evaluation before
    assert [m["step"] for m in read_metrics(f"{run}/metrics.jsonl")] == [0, 20]
    left = sorted(p.name for p in Path(run).iterdir())
    assert left == ["best.pt", "config.yaml", "last.pt", "metrics.jsonl", "timeline.jsonl"]  # no lock, temp


def test_a_second_signal_during_the_save_the_first_asked_for_waits_for_it(tiny_config, monkeypatch):
    """Ctrl-C at step 5, then again while last.pt is being written: the second stops the run once
    last.pt is whole (not half-way, which left a run with no last.pt, refused both ways)."""
    import tinygpt.files.checkpoint

    run, real, saves = Path(tiny_config.out_dir), tinygpt.files.checkpoint.write_atomic, []
    signal_during_step(monkeypatch, 5)

    def write_atomic(path, data):
        saves.append(Path(path).name)
        if saves == ["last.pt", "best.pt", "last.pt"]:  # step 0's two, then the stop's at step 5
            signal.raise_signal(signal.SIGINT)  # its handler runs here, inside the save
        real(path, data)

    monkeypatch.setattr(tinygpt.files.checkpoint, "write_atomic", write_atomic)
    with pytest.raises(Interrupted, match="stopped by a second SIGINT once last.pt was saved") as e:
        train(tiny_config, progress=False)
    assert e.value.exit_code == 130
    assert read_checkpoint(run / "last.pt").step == 5
    monkeypatch.undo()
    assert train(tiny_config, resume=True, progress=False)["step"] == 60


def test_sighup_when_the_terminal_closes_stops_like_sigterm(tiny_config, monkeypatch):
    # as in a terminal: a process started under nohup ignores SIGHUP, and keeps ignoring it
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        signal_during_step(monkeypatch, 7, signal.SIGHUP)
        with pytest.raises(Interrupted, match="stopped by SIGHUP at step 7") as e:
            train(tiny_config, progress=False)
        assert e.value.exit_code == 129
        assert read_checkpoint(f"{tiny_config.out_dir}/last.pt").record["step"] == 7
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_stop_during_an_evaluation_abandons_it_within_a_batch(tiny_config, monkeypatch):
    """SIGTERM in the evaluation at step 20 (of 50 batches a split): it ends there, and logs nothing of it."""
    tiny_config.train.eval_iters = 50
    forward, evaluated = training_setup.GPT.forward, []

    def counting_forward(model, *args, **kwargs):
        if not model.training and len(args) == 2:  # an evaluation batch, (x, y): not the timeline's
            evaluated.append(1)
            if len(evaluated) == 100 + 3:  # the step-20 evaluation's third batch (step 0's took 2 × 50)
                signal.raise_signal(signal.SIGTERM)
        return forward(model, *args, **kwargs)

    monkeypatch.setattr(training_setup.GPT, "forward", counting_forward)
    with pytest.raises(Interrupted, match="stopped by SIGTERM at step 20"):
        train(tiny_config, progress=False)
    assert len(evaluated) == 100 + 3  # step 0's evaluation, then three batches of step 20's
    run = tiny_config.out_dir
    assert [m["step"] for m in read_metrics(f"{run}/metrics.jsonl")] == [0]
    assert read_checkpoint(f"{run}/last.pt").record["step"] == 20  # resumable from where it stopped
    monkeypatch.undo()
    train(tiny_config, resume=True, progress=False)
    assert [m["step"] for m in read_metrics(f"{run}/metrics.jsonl")] == [0, 20, 40, 60]  # 20's done then


def test_a_signal_before_training_starts_stops_at_once(tiny_config, monkeypatch):
    real = training_setup.load_corpus

    def load_corpus(*args):
        signal.raise_signal(signal.SIGTERM)
        return real(*args)

    monkeypatch.setattr(training_setup, "load_corpus", load_corpus)
    with pytest.raises(Interrupted, match="by SIGTERM before training began") as e:
        train(tiny_config, progress=False)
    assert e.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.slow
def test_under_torchrun_one_signal_stops_every_rank_at_the_same_step(tmp_path, corpus_file):
    """torchrun passes Ctrl-C on to each rank; they agree on a step, save once and stop."""
    raw = tiny_raw(
        corpus_file, tmp_path / "run", max_iters=10**6, eval_interval=20, eval_iters=2, batch_size=4
    )
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    job = subprocess.Popen(
        [*TORCHRUN, str(ROOT / "scripts" / "train.py"), "--config", str(config), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run, metrics = tmp_path / "run", tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not metrics.exists() or metrics.read_text().count("\n") < 2:  # step 20's evaluation is written
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.1)
    job.send_signal(signal.SIGINT)
    _, err = job.communicate(timeout=240)
    saved = read_checkpoint(run / "last.pt")
    step = saved.record["step"]
    assert step >= 20 and step % 5 == 0 and len(saved.rng) == 2  # log_interval 5: where ranks agree
    assert err.count(f"stopped by SIGINT at step {step}; saved {run / 'last.pt'}") == 1  # rank 0 speaks
    assert f"--config {run / 'config.yaml'} --resume" in err
    assert sorted(p.name for p in run.iterdir()) == [
        "best.pt",
        "config.yaml",
        "last.pt",
        "metrics.jsonl",
        "timeline.jsonl",  # written by rank 0 alone
    ]
