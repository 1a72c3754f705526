"""Issue 36's attribution and patching targets, on the attention-only induction run.

configs/induction_attention_only.yaml (seed 1, one thread) cut to STEPS steps: its induction circuit
forms by step 750 (docs/circuits.md), and without MLPs the induction head writes the copied character's
logit itself, so direct logit attribution names it; with MLPs the layer-1 MLP writes most of it
(docs/circuits.md, "What patching says about the circuit"). Measured as scripts/attribution_figures.py
measures the guide's figures: the head `inspect --heads` calls induction is the largest positive part of
the copied character's logit at most of the probes' second-copy positions, and its output alone
restores most of the clean logit difference in patching, where the head that plays the least part
restores little.
"""

import importlib.util
import statistics
from pathlib import Path

import pytest
import torch
from conftest import trained_on_one_thread

import tinygpt
from tinygpt.explain.heads import checkpoint_heads

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

ROOT = Path(__file__).resolve().parents[2]
STEPS = 1500


def figures_script():
    spec = importlib.util.spec_from_file_location(
        "attribution_figures", ROOT / "scripts" / "attribution_figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return trained_on_one_thread("induction_attention_only", tmp_path_factory.mktemp("attention_only"), STEPS)


def test_the_induction_head_is_the_largest_direct_part_and_patching_it_restores_the_answer(run):
    script = figures_script()
    lm = tinygpt.load(run / "best.pt")
    assert not lm.model.config.mlp
    head, idle = script.roles(checkpoint_heads(run / "best.pt"))
    assert head[0] == 1
    with torch.no_grad():
        share = script.attribution_share(lm, head)
        ours, theirs, _ = script.patched(lm, head, idle)
    assert share.positions == 304 and not [part for part in share.means if part.startswith("mlp")]
    wins = share.largest.get(f"{head[0]}.{head[1]}", 0)
    assert wins >= 0.8 * share.positions, share.largest  # issue 36: at least 80% of the positions
    assert len(ours) == script.PAIRS
    assert statistics.mean(ours) >= 0.6, ours  # issue 36: the induction head's output alone restores >= 0.6
    assert abs(statistics.mean(theirs)) < 0.2, theirs  # the head that plays the least part restores little
