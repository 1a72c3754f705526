"""benchmarks/dtype_speed.py end to end on a tiny config."""

import json
import sys

import pytest
import yaml
from conftest import load_benchmark, tiny_raw


def test_float32_and_bfloat16_are_timed_in_turn_and_compared(corpus_file, tmp_path, monkeypatch, capsys):
    module = load_benchmark("dtype_speed")
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(corpus_file, tmp_path / "run")))
    out = tmp_path / "speed.json"
    args = ["--config", str(config), "--rounds", "2", "--steps-per-round", "3", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", ["dtype_speed.py", *args])
    module.main()

    result = json.loads(out.read_text())
    speeds = result["tokens_per_s"]
    assert set(speeds) == {"float32", "bfloat16"} and min(speeds.values()) > 0
    assert result["steps_timed_each"] == 6
    assert result["bfloat16_vs_float32"] == pytest.approx(speeds["bfloat16"] / speeds["float32"])
    assert f"({result['bfloat16_vs_float32']:.2f}×)" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()  # a benchmark writes no run directory
