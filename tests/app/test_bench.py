import json

import pytest
import torch
from conftest import tiny_raw

from tinygpt.app.bench import PeakMemory, benchmark, format_report
from tinygpt.app.cli import main
from tinygpt.config.run_config import from_dict
from tinygpt.training import flops
from tinygpt.training.flops import Stopwatch


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_stopwatch_and_peak_memory_on_cuda():
    device = torch.device("cuda")
    watch, memory = Stopwatch(device), PeakMemory(device)
    memory.reset()
    watch.mark()
    x = torch.ones(2**20, device=device)  # 4 MiB
    watch.mark()
    assert len(watch.intervals()) == 1 and memory.peak_bytes() >= x.numel() * 4


def test_peak_memory_sees_a_large_allocation_on_cpu():
    memory = PeakMemory(torch.device("cpu"))
    memory.reset()
    before = memory.peak_bytes()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, every page touched
    assert memory.peak_bytes() >= before + 60 * 2**20
    del block


def test_benchmark_measures_everything_and_reports_it(corpus_file, tmp_path, monkeypatch):
    monkeypatch.setitem(flops.MATMUL_SIZES, "cpu", (64,))
    config = from_dict(tiny_raw(corpus_file, tmp_path / "run"))
    result = benchmark(config, steps=3, warmup=1, lengths=(4, 9), progress=False)
    training = result["training"]
    assert training["tokens_per_s"] == pytest.approx(8 * 16 / training["step_s_median"])
    assert training["compile_s"] is None and training["peak_memory_bytes"] > 0
    assert set(result["generation_tokens_per_s"]) == {"cache", "no_cache"}
    assert all(set(s) == {4, 9} for s in result["generation_tokens_per_s"].values())
    assert result["achieved_flops"] == pytest.approx(result["flops_per_token"] * training["tokens_per_s"])
    assert result["mfu"] == pytest.approx(result["achieved_flops"] / result["peak_matmul_flops"])
    report = format_report(result)
    assert "MFU" in report and "without cache: 4 tokens" in report
    assert not (tmp_path / "run").exists()  # a benchmark writes no run directory


def test_bench_command_prints_json(corpus_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(flops.MATMUL_SIZES, "cpu", (64,))
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(tiny_raw(corpus_file, tmp_path / "run")))  # JSON is YAML
    args = ["bench", "--config", str(config), "--steps", "2", "--warmup", "0", "--lengths", "3", "--json"]
    assert main([*args, "--quiet", "--set", "train.dtype=bfloat16"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["train"]["dtype"] == "bfloat16" and result["mfu"] > 0


def test_bench_command_rejects_zero_steps(corpus_file, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(tiny_raw(corpus_file, tmp_path / "run")))
    assert main(["bench", "--config", str(config), "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option, value, most",
    [
        ("--steps", "99999999999", "100,000"),
        ("--warmup", "200000", "100,000"),
        ("--lengths", "99999999999", "1,000,000"),
    ],
)
def test_bench_command_refuses_absurd_counts_before_running(
    corpus_file, tmp_path, capsys, option, value, most
):
    """It ran them, silent until the end (with --quiet): a typo's days of steps."""
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(tiny_raw(corpus_file, tmp_path / "run")))
    assert main(["bench", "--config", str(config), "--quiet", option, value]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {option} {int(value):,} is more than a benchmark needs")
        and err.count("\n") == 1
    )
    assert err.rstrip().endswith(f"use at most {most}")


def test_bench_command_refuses_a_model_that_cannot_fit(corpus_file, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(tiny_raw(corpus_file, tmp_path / "run")))
    huge = ["--set", "model.n_embd=200000", "--set", "model.n_head=1"]
    assert main(["bench", "--config", str(config), "--quiet", *huge]) == 2
    assert "the model is too large to train here" in capsys.readouterr().err
