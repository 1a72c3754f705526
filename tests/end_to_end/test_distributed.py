"""Training on two CPU processes with torchrun (gloo), as a user starts it."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import yaml
from conftest import own_process_group, tiny_raw, train

from tinygpt.config.run_config import from_dict
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.training import distributed
from tinygpt.training.distributed import from_environment, process_group

pytestmark = pytest.mark.slow  # torchrun jobs of two processes

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def torchrun(script: Path, raw: dict, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    config = tmp_path / f"{Path(raw['out_dir']).name}.yaml"
    config.write_text(yaml.safe_dump(raw))
    command = [*TORCHRUN, str(script), "--config", str(config), "--quiet", *args]
    with own_process_group(command, ROOT) as job:
        out, err = job.communicate(timeout=300)  # a guard against a hang: a healthy run takes seconds
    return subprocess.CompletedProcess(command, job.returncode, out, err)


def test_two_processes_train_like_one_process_with_the_same_global_batch(corpus_file, tmp_path):
    """2 ranks × batch 4 against 1 process × 2 micro-batches of 4; resuming is exact under torchrun."""
    constant_lr = dict(warmup_iters=0, learning_rate=3e-3, min_lr=3e-3)  # max_iters can't change it
    ddp = dict(batch_size=4, eval_interval=20, eval_iters=4, **constant_lr)
    model = {"dropout": 0.1}  # per-rank dropout streams, which resume must restore too

    def raw(name: str, **train) -> dict:
        r = tiny_raw(corpus_file, tmp_path / name, **{**ddp, **train})
        r["model"].update(model)
        return r

    train_py = ROOT / "scripts" / "train.py"
    straight = torchrun(train_py, raw("straight", max_iters=40), tmp_path)
    assert straight.returncode == 0, straight.stderr
    assert "global batch 8 = 4 per rank × 2 ranks × 1 accumulation steps" in straight.stdout
    assert straight.stdout.count("done: step 40") == 1  # rank 0 speaks for the job

    run = tmp_path / "straight"
    files = ["best.pt", "config.yaml", "last.pt", "metrics.jsonl", "timeline.jsonl"]
    assert sorted(p.name for p in run.iterdir()) == files
    metrics = [json.loads(line) for line in open(run / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [0, 20, 40]  # written once, by rank 0
    assert [json.loads(line)["step"] for line in open(run / "timeline.jsonl")] == [0, 20, 40]  # so is this
    last = read_checkpoint(run / "last.pt")
    assert last.record["world_size"] == 2 and last.record["global_batch"] == 8
    assert last.record["tokens_seen"] == 40 * 8 * 16
    assert not [k for k in last.weights if k.startswith("module.")]  # the unwrapped model's weights
    assert len(last.rng) == 2

    # one process, the same global batch as 2 micro-batches of 4: the same start, close after 40 steps
    single = from_dict(raw("single", max_iters=40, grad_accum_steps=2))
    record = train(single, progress=False)
    alone = [json.loads(line) for line in open(tmp_path / "single" / "metrics.jsonl")]
    assert alone[0]["val_loss"] == pytest.approx(metrics[0]["val_loss"], abs=1e-6)  # same eval batches
    assert metrics[-1]["val_loss"] < metrics[0]["val_loss"] - 0.5  # both learned …
    assert record["val_loss"] < alone[0]["val_loss"] - 0.5
    assert metrics[-1]["val_loss"] == pytest.approx(record["val_loss"], abs=0.05)  # … about as much

    # stopped at step 20 and resumed under torchrun: the same weights as the straight run
    first = torchrun(train_py, raw("split", max_iters=20), tmp_path)
    assert first.returncode == 0, first.stderr
    resumed = torchrun(train_py, raw("split", max_iters=40), tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    split = read_checkpoint(tmp_path / "split" / "last.pt").weights
    assert all(torch.equal(split[k], last.weights[k]) for k in split)


def test_a_failing_rank_ends_the_whole_job(corpus_file, tmp_path):
    raw = tiny_raw(corpus_file, tmp_path / "run", batch_size=4, eval_iters=2)
    result = torchrun(ROOT / "tests" / "helpers" / "failing_rank.py", raw, tmp_path)
    assert result.returncode != 0
    assert "error: rank 1 of 2: injected failure on this rank" in result.stderr
    # it failed in the third step: last.pt is step 0's (saved at the first evaluation), none after it
    assert read_checkpoint(tmp_path / "run" / "last.pt").record["step"] == 0


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists threads through Linux's /proc")
def test_the_process_group_is_gone_with_its_threads_when_training_returns(corpus_file, tmp_path):
    """gloo's threads are joined while Python runs, so none can abort the interpreter's shutdown."""
    raw = tiny_raw(corpus_file, tmp_path / "run", batch_size=4, max_iters=10, eval_interval=10)
    result = torchrun(ROOT / "tests" / "helpers" / "threads_after_training.py", raw, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "rank 0: gloo threads left: []" in result.stdout
    assert "rank 1: gloo threads left: []" in result.stdout


def test_ranks_come_from_torchruns_environment(monkeypatch):
    cpu = torch.device("cpu")
    one = from_environment(cpu)
    assert (one.rank, one.world_size, one.is_main, one.distributed) == (0, 1, True, False)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    ranks = from_environment(cpu)
    assert (ranks.rank, ranks.local_rank, ranks.world_size, ranks.is_main) == (3, 1, 4, False)
    assert ranks.device == cpu
    monkeypatch.setenv("WORLD_SIZE", "four")
    with pytest.raises(UserError, match="must be integers"):
        from_environment(cpu)


@pytest.mark.parametrize("ends", ["well", "with an error"])
def test_ranks_leave_together_only_after_a_job_that_went_well(monkeypatch, ends):
    """A barrier before teardown lets gloo's threads let go of the last tensors while Python still runs.

    After an error there is none: the other ranks may never arrive to meet it.
    """
    calls = []
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda *a, **k: calls.append("init"))
    monkeypatch.setattr(distributed.dist, "barrier", lambda **k: calls.append(("barrier", k)))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")

    with pytest.raises(UserError, match="^rank 1 of 2: bad") if ends != "well" else nullcontext():
        with process_group(torch.device("cpu")):
            if ends != "well":
                raise UserError("bad")
    barrier = [("barrier", {"device_ids": None})] if ends == "well" else []
    assert calls == ["init", *barrier, "destroy"]


def test_a_config_mistake_under_torchrun_is_said_once_for_the_job(corpus_file, tmp_path):
    raw = tiny_raw(corpus_file, tmp_path / "run")
    raw["train"]["lerning_rate"] = 1e-3  # misspelt: every rank finds it
    result = torchrun(ROOT / "scripts" / "train.py", raw, tmp_path)
    assert result.returncode != 0
    said = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    hint = "did you mean 'train.learning_rate'?"
    assert said == [f"error: {tmp_path / 'run.yaml'}: unknown key 'train.lerning_rate'; {hint}"]  # one rank


def test_a_time_budget_under_torchrun_fits_the_same_max_iters_on_every_rank(corpus_file, tmp_path):
    """Each rank reads its own clock; they agree on the slowest's, or one would wait for the other at a
    step the other never reaches (the timeout in torchrun() is the guard)."""
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=100_000, max_minutes=0.15, eval_interval=100_000)
    result = torchrun(ROOT / "scripts" / "train.py", raw, tmp_path)
    assert result.returncode == 0, result.stderr
    (done,) = [line for line in result.stdout.splitlines() if line.startswith("done: step ")]  # rank 0's
    step = int(done.split()[2].rstrip(","))
    said = result.stdout + result.stderr
    fits = re.findall(r"^time budget 0.15 min, [\d.]+ in at step \d+: (?:max_iters|spent)", said, re.M)
    assert fits and said.count("time budget") == len(fits), said  # each said once, by rank 0
    metrics = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert metrics[-1]["step"] == step < 100_000  # ended by the budget, evaluated and saved there
    assert metrics[-1]["time_s"] < 0.15 * 60 + 30  # the budget, and the final evaluation after it


LAUNCH = [sys.executable, "-m", "tinygpt.training.launch", "--standalone", "--nproc_per_node=2"]


def test_ctrl_c_on_a_job_started_by_tinygpt_torchrun_ends_quietly(corpus_file, tmp_path):
    """Ctrl-C reaches the terminal's whole foreground group (here: killpg); the job saves and ends
    with the ranks' two lines, exit 130, and neither torchrun's traceback nor a line per rank."""
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=10**6, eval_interval=20, eval_iters=2)
    raw["train"]["batch_size"] = 4
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    command = [*LAUNCH, str(ROOT / "scripts" / "train.py"), "--config", str(config), "--quiet"]
    run = tmp_path / "run"
    with own_process_group(command, ROOT) as job:
        deadline = time.monotonic() + 240
        metrics = run / "metrics.jsonl"
        while not metrics.exists() or metrics.read_text().count("\n") < 2:  # step 20's evaluation: under way
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.1)
        os.killpg(job.pid, signal.SIGINT)
        _, err = job.communicate(timeout=240)
    step = read_checkpoint(run / "last.pt").record["step"]
    assert job.returncode == 130, err
    assert "Traceback" not in err and "SignalException" not in err and "death signal" not in err
    assert err.count("SIGINT: saving the last whole step to last.pt") == 1  # rank 0 says it for the job
    assert err.count(f"stopped by SIGINT at step {step}; saved {run / 'last.pt'}") == 1
    assert "Failed to initialize NumPy" not in err  # the scripts' subprocesses see no NumPy (conftest)


def test_tinygpt_torchrun_prints_no_numpy_warning_where_plain_torchrun_does():
    """Without NumPy (hidden from subprocesses by conftest), torch warns as it is imported."""
    plain = subprocess.run([*TORCHRUN, "--help"], capture_output=True, text=True, timeout=300)
    ours = subprocess.run([*LAUNCH, "--help"], capture_output=True, text=True, timeout=300)
    assert "Failed to initialize NumPy" in plain.stderr  # the warning this is about, where it appears
    assert ours.returncode == 0 and "--nproc_per_node" in ours.stdout  # torchrun's own options
    assert "Failed to initialize NumPy" not in ours.stderr
