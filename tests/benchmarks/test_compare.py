"""benchmarks/compare.py end to end, against a stand-in for nanoGPT's model.py (its interface, our model)."""

import json
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import load_benchmark, tiny_raw

STAND_IN = """
from dataclasses import dataclass

import torch

from tinygpt.generation.sampling import generate
from tinygpt.model import GPT as OurGPT, GPTConfig as OurConfig


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class GPT(OurGPT):
    def __init__(self, config):
        super().__init__(OurConfig(**vars(config)))
        print("number of parameters: printed, as the reference does")

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas, weight_decay=weight_decay)

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        return generate(self, idx, max_new_tokens, temperature, top_k, use_cache=False)
"""


@pytest.fixture
def setup(tmp_path, corpus_file):
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "model.py").write_text(STAND_IN)
    config = tmp_path / "tiny.yaml"
    config.write_text(json.dumps(tiny_raw(corpus_file, tmp_path / "run", max_iters=6)))
    return tmp_path, config, corpus_file


@pytest.fixture
def compare(monkeypatch, capsys):
    """Run compare.py's command line in this process (no second torch import); return its JSON."""
    module = load_benchmark("compare")

    def run(*args: str) -> dict:
        monkeypatch.setattr(sys, "argv", ["compare.py", *args])
        module.main()
        out = capsys.readouterr().out
        return json.loads(out[out.index("{") :])

    return run


def test_speed_reports_both_and_their_ratio(setup, compare):
    tmp, config, _ = setup
    out = compare("speed", "--nanogpt", str(tmp / "reference"), "--config", str(config), "--rounds", "2")
    speeds = out["tokens_per_s"]
    assert set(speeds) == {"tinygpt tiny", "nanoGPT"} and out["steps_timed_each"] == 6
    assert out["ratio"] == pytest.approx(speeds["tinygpt tiny"] / speeds["nanoGPT"])


def test_generate_times_cache_no_cache_and_reference(setup, compare):
    tmp, config, _ = setup
    out = compare("generate", "--nanogpt", str(tmp / "reference"), "--config", str(config), "--tokens", "20")
    speeds = out["tokens_per_s"]
    assert out["ratio_cache_vs_reference"] == pytest.approx(speeds["tinygpt (KV cache)"] / speeds["nanoGPT"])


def test_quality_curves_json_and_plot(setup, compare):
    tmp, config, corpus = setup
    plot, saved = tmp / "quality.svg", tmp / "quality.json"
    args = ["quality", "--corpus", str(corpus), "--run", str(config), "--run", f"{config} train.max_iters=4"]
    out = compare(*args, "--evals", "2", "--target", "2.5", "--plot", str(plot), "--json", str(saved))
    runs = out["runs"]
    assert list(runs) == ["tinygpt tiny", "tinygpt tiny train.max_iters=4"]
    assert [step for step, _, _ in runs["tinygpt tiny"]["curve"]] == [0, 3, 6]
    assert [step for step, _, _ in runs["tinygpt tiny train.max_iters=4"]["curve"]] == [0, 2, 4]
    seconds = [s for _, s, _ in runs["tinygpt tiny"]["curve"]]
    assert seconds == sorted(seconds) and seconds[0] == 0
    assert json.loads(saved.read_text())["runs"] == runs
    svg = ET.parse(plot).getroot()
    assert len(svg.findall("{http://www.w3.org/2000/svg}polyline")) == 2
