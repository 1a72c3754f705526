"""The two-head induction circuit forms in a real training run on the built-in induction corpus, and the
tools see it: the timeline names the step, the induction head copies at every distance, and switching
the previous-token head off takes the induction head's targets away.

The run is configs/induction.yaml (seed 1) cut to STEPS steps and evaluated every 250; the circuit
forms by step 500 at this seed on one thread, and by step 750 at each of seeds 1-5 (docs/circuits.md),
so STEPS leaves room for a CPU whose float sums fall another way. Its strings are 6-30 letters
long, so each copy sits at its own distance: the induction score is measured on probes whose copies
sit 8 to 32 characters back (tinygpt.explain.heads), and checked here at the near, middle and far
ones separately, so a head that copies from one fixed distance cannot pass.
"""

import pytest
import torch
from conftest import trained_on_one_thread

from tinygpt.explain.circuits import knockouts
from tinygpt.explain.heads import induction_probes
from tinygpt.explain.roles import THRESHOLDS, Boundaries, induction_keys, probe_distances
from tinygpt.explain.timeline import first_cleared, read_timeline
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.model import attention_weights

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

STEPS = 1500


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("induction")
    return trained_on_one_thread("induction", root, STEPS, "train.eval_interval=250", "train.eval_iters=4")


@pytest.fixture(scope="module")
def model(run):
    return read_checkpoint(run / "best.pt").build_model(run / "best.pt").eval()


@pytest.fixture(scope="module")
def letters(model, run):
    """The induction probes as the tools draw them: no space, no newline."""
    chars = read_checkpoint(run / "best.pt").chars
    avoid = Boundaries.of({c: i for i, c in enumerate(chars)}).any
    return induction_probes(model.config.vocab_size, model.config.block_size, avoid=avoid), avoid


def induction_by_distance(model, probes: torch.Tensor) -> torch.Tensor:
    """Each layer-1 head's induction score on each probe: (P, nh)."""
    weights = attention_weights(model, probes)[1]  # (P, nh, T, T)
    keys = induction_keys(*probes.shape)  # (P, T, T)
    return torch.stack([(weights[p] * keys[p]).sum(dim=(-1, -2)) / keys[p].sum() for p in range(len(probes))])


def test_the_timeline_names_the_step_the_induction_head_formed_and_the_loss_on_repeats_falls(run):
    snapshots = read_timeline(run / "timeline.jsonl")
    formed = [
        (step, layer, head) for step, layer, head in first_cleared(snapshots)["induction"] if layer == 1
    ]
    assert formed, "a layer-1 head clears the induction threshold, and the timeline names the step"
    step = formed[0][0]
    at = [s["step"] for s in snapshots].index(step)
    assert 0 < step <= STEPS
    before = max(h["scores"]["induction"] for h in snapshots[at - 1]["heads"])
    assert before < THRESHOLDS["induction"]
    assert snapshots[0]["repeat_loss"] > 2.9  # about ln 22 at first: the copies as hard as anything else
    assert snapshots[at]["repeat_loss"] < snapshots[0]["repeat_loss"] - 1.0


def previous_scores(model, probes: torch.Tensor) -> torch.Tensor:
    """Each layer-0 head's mean weight on the position just before the query: (nh,)."""
    weights = attention_weights(model, probes)[0]  # (P, nh, T, T)
    T = probes.size(1)
    return weights[:, :, torch.arange(1, T), torch.arange(T - 1)].mean(dim=(0, 2))


def test_layer_1_copies_at_near_middle_and_far_distances_and_layer_0_looks_one_back(model, letters):
    probes, _ = letters
    scores = induction_by_distance(model, probes)  # (P, nh)
    best = int(scores.mean(dim=0).argmax())
    distances = probe_distances(*probes.shape)
    for part in torch.tensor_split(torch.arange(len(probes)), 3):  # near, middle, far
        assert scores[part, best].mean() > 0.25, f"copies {distances[part].tolist()} back"
    assert float(previous_scores(model, probes).max()) > 0.2  # 1/33 on average for an even spread


def test_switching_the_previous_token_head_off_takes_the_induction_heads_targets_away(model, letters):
    probes, avoid = letters
    k = knockouts(model, avoid)
    assert k.target[0] == 1 and k.score >= THRESHOLDS["induction"]
    weakest = min(k.without, key=k.without.get)  # the layer-0 head it cannot do without
    assert k.score - k.without[weakest] > 0.25  # a clear margin
    assert float(previous_scores(model, probes)[weakest[1]]) > 0.2  # and that head looks one back
