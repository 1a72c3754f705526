"""Training FLOPs per token, the matmul peak, and MFU: in `tinygpt bench` and on the training bar."""

import re

import pytest
import torch
from conftest import tiny_raw

from tinygpt import GPT, GPTConfig, load_checkpoint
from tinygpt.config.run_config import from_dict
from tinygpt.training import flops, loop, progress
from tinygpt.training.flops import Stopwatch, Utilisation, flops_per_token, matmul_peak
from tinygpt.training.progress import ABOVE_PEAK_NOTE


def test_flops_per_token_by_hand():
    model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=4, bias=False))
    # N without wpe: wte 10·4 + ln_1 4 + c_attn 4·12 + attn.c_proj 4·4 + ln_2 4 + c_fc 4·16
    #                + mlp.c_proj 16·4 + ln_f 4
    n = 40 + 4 + 48 + 16 + 4 + 64 + 64 + 4
    assert flops_per_token(model) == 6 * n + 12 * 1 * 8 * 4


def test_flops_per_token_at_shakespeare_char_size():
    model = GPT(GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, bias=True))
    n = 65 * 384 + 6 * (4 * 384 + 384 * 1152 + 1152 + 384 * 384 + 384 + 2 * 384 * 1536 + 1536 + 384) + 768
    assert n == model.num_params() - 256 * 384 == 10_672_512
    assert flops_per_token(model) == pytest.approx(71.1e6, rel=1e-3)  # 64.0M for the weights, 7.1M attention


def test_stopwatch_gives_intervals_between_marks(monkeypatch):
    clock = iter([10.0, 10.5, 12.0, 12.25])
    monkeypatch.setattr(flops.time, "perf_counter", lambda: next(clock))
    watch = Stopwatch(torch.device("cpu"))
    for _ in range(4):
        watch.mark()
    assert watch.intervals() == [0.5, 1.5, 0.25]  # each mark to the next, in order


def test_matmul_peak_is_the_best_size(monkeypatch):
    monkeypatch.setitem(flops.MATMUL_SIZES, "cpu", (32, 64))
    peak = matmul_peak(torch.device("cpu"), torch.float32, progress=False)
    assert set(peak["by_size"]) == {32, 64}
    assert peak["flops"] == max(peak["by_size"].values()) > 0


def test_utilisation_is_achieved_flops_over_the_peak():
    mfu = Utilisation(flops_per_token=2e6, peak_flops=1e12)
    assert mfu.achieved(5e4) == 1e11
    assert mfu.of(5e4) == pytest.approx(0.1)


def test_the_training_bar_shows_mfu_as_bench_computes_it(corpus_file, tmp_path, monkeypatch, capsys):
    """The bar's mfu is flops_per_token × its tok_s ÷ the peak measured at the start (here fixed, high
    enough for a tiny model to stay well under it)."""
    measured = []
    monkeypatch.setattr(
        progress, "matmul_peak", lambda *args, **kwargs: measured.append(args) or {"flops": 1e12}
    )
    config = from_dict(tiny_raw(corpus_file, tmp_path / "run", max_iters=20, log_interval=5))
    loop.train(config, progress=True)
    bar = capsys.readouterr().err.split("\r")[-1]  # the bar as it closed, with the last log step's figures
    tok_s = float(re.search(r"tok_s=([\d,]+)", bar)[1].replace(",", ""))
    mfu = float(re.search(r"mfu=([\d.]+)%", bar)[1])
    per_token = flops_per_token(load_checkpoint(tmp_path / "run" / "last.pt")[0])
    assert mfu == pytest.approx(100 * per_token * tok_s / 1e12, abs=0.05 + 100 * per_token * 0.5 / 1e12)
    assert [sizes for _, _, sizes in measured] == [flops.MATMUL_SIZES["cpu"][:1]]  # once, bench's smallest


def test_the_bar_never_shows_more_than_the_measured_peak_without_saying_why(
    corpus_file, tmp_path, monkeypatch, capsys
):
    """A peak measured low (a busy machine at the start of the run): 100%+, and once, the reason."""
    monkeypatch.setattr(progress, "matmul_peak", lambda *args, **kwargs: {"flops": 1e3})
    loop.train(
        from_dict(tiny_raw(corpus_file, tmp_path / "run", max_iters=20, log_interval=5)), progress=True
    )
    out, err = capsys.readouterr()
    assert "mfu=100%+" in err.split("\r")[-1] and not re.search(r"mfu=(\d{4,}|[2-9]\d\d|1\d\d)\.", err)
    assert out.count(ABOVE_PEAK_NOTE) == 1


def test_no_peak_is_measured_without_a_bar(corpus_file, tmp_path, monkeypatch):
    monkeypatch.setattr(
        progress, "matmul_peak", lambda *a, **k: pytest.fail("measured with no bar to show it")
    )
    loop.train(from_dict(tiny_raw(corpus_file, tmp_path / "run", max_iters=4)), progress=False)
