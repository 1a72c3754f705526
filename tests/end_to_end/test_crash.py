"""A training process killed in the middle of a save, resumed, interrupted and resumed again.

The processes are real: scripts/train.py, SIGKILL, SIGINT. To kill a save
half-way for certain, the first process gets a sitecustomize that makes its
third write of last.pt (step 0's, step 10's, then step 20's) stall after half the bytes, as a hung
disk would.
"""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_interrupt import signal_during_step

from tinygpt.app.cli import main
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.metrics import read_metrics
from tinygpt.files.snapshots import read_timeline

pytestmark = pytest.mark.slow  # real training processes, killed and resumed

ROOT = Path(__file__).resolve().parents[2]
TRAIN_PY = str(ROOT / "scripts" / "train.py")

STALL_THIRD_SAVE_OF_LAST_PT = """
import builtins, io, os, re, time

_open, _saves = builtins.open, []


class _Stalls(io.FileIO):
    def write(self, data):
        super().write(bytes(data)[: len(data) // 2])
        os.fsync(self.fileno())
        _open(os.environ["STALLED_MARKER"], "w").close()
        time.sleep(600)


def open(file, mode="r", *args, **kwargs):
    if re.fullmatch(r"[.]last[.]pt[.][0-9]+[.]partial", os.path.basename(str(file))):
        _saves.append(file)
        if len(_saves) == 3:
            return _Stalls(file, "wb")
    return _open(file, mode, *args, **kwargs)


builtins.open = open
"""


def start(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, TRAIN_PY, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **env},
    )


def wait_until(condition, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)


def saved_step(run: Path) -> int:
    return read_checkpoint(run / "last.pt").record["step"]


def evaluated_steps(run: Path) -> list[int]:
    return [m["step"] for m in read_metrics(run / "metrics.jsonl")]


@pytest.mark.usefixtures("one_thread", "ctrl_c_handled")
def test_killed_mid_save_then_resumed_interrupted_and_resumed(tmp_path, corpus_file, monkeypatch, capsys):
    run = tmp_path / "run"
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: {n_layer: 1, n_head: 2, n_embd: 16, block_size: 16, dropout: 0.0}\n"
        f"data: {{corpus: {corpus_file}}}\n"
        "train: {max_iters: 1000000, eval_interval: 10, eval_iters: 2, batch_size: 4, device: cpu}\n"
        f"out_dir: {run}\n"
    )

    # 1. kill -9 half-way through the save of last.pt at step 20
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(STALL_THIRD_SAVE_OF_LAST_PT)
    stalled = tmp_path / "stalled"
    first = start(
        "--config", str(config), "--quiet", PYTHONPATH=str(tmp_path / "hooks"), STALLED_MARKER=str(stalled)
    )
    wait_until(stalled.exists, first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    (partial,) = run.glob(".last.pt.*.partial")  # half a checkpoint: the kill came mid-save
    assert partial.stat().st_size > 0
    for name in ("last.pt", "best.pt"):  # the previous ones, whole
        saved = read_checkpoint(run / name)
        assert saved.record["step"] == 10 and all(torch.isfinite(w).all() for w in saved.weights.values())
    assert evaluated_steps(run) == [0, 10, 20]  # step 20 was logged just before its save
    assert (run / "lock").exists()  # no clean-up ran
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 30, "tok')  # and say it also died while writing a line
    assert [s["step"] for s in read_timeline(run / "timeline.jsonl")] == [0, 10, 20]
    with open(run / "timeline.jsonl", "a") as f:
        f.write('{"step": 30, "train_loss"')  # of both files

    # 2. --resume takes the dead run's directory over; Ctrl-C stops it and says how to go on
    second = start("--config", str(config), "--resume", "--quiet")
    wait_until(lambda: saved_step(run) > 10, second)
    second.send_signal(signal.SIGINT)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 130, err
    assert "resuming at step 10" in out
    stopped_at = saved_step(run)
    assert f"stopped by SIGINT at step {stopped_at}; saved {run / 'last.pt'}" in err
    resume = err.strip().splitlines()[-1]
    assert resume == f"to resume: python {TRAIN_PY} --config {run / 'config.yaml'} --resume"

    # 3. the printed command continues the run (here in-process, to spare a third start of torch);
    #    SIGTERM during its third step (its fourth, if the third ends on an evaluation step, whose
    #    evaluation a stop would abandon for the next resume) stops it the same way, with 143
    command = shlex.split(resume.removeprefix("to resume: "))
    assert command[:2] == ["python", TRAIN_PY]
    extra = 3 if (stopped_at + 3) % 10 else 4  # where SIGINT came depends on the machine's speed
    signal_during_step(monkeypatch, stopped_at + extra, signal.SIGTERM)
    assert main(["train", *command[2:], "--quiet"]) == 143
    final = saved_step(run)
    assert final == stopped_at + extra and f"stopped by SIGTERM at step {final}" in capsys.readouterr().err

    steps = evaluated_steps(run)  # every evaluation once, in order, none past last.pt
    assert steps == list(range(0, final + 1, 10))
    assert [s["step"] for s in read_timeline(run / "timeline.jsonl")] == steps  # its snapshots the same
    assert sorted(p.name for p in run.iterdir()) == [
        "best.pt",
        "config.yaml",
        "last.pt",
        "metrics.jsonl",
        "timeline.jsonl",
    ]
