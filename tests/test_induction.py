"""An induction head forms during a real training run, and the tools see it: the timeline names the
step, `--heads` labels it, and switching it off costs the copies, not the originals.

The corpus is random strings of 16 letters, each written twice on a line: the second copy is
predictable only by looking back to where the same letters stood 16 characters before, which is
what the induction score measures (heads.py: from each position of the second copy, the weight on
the position after the same character's place in the first). With every string half a block
long, a head can find that place by its distance alone, so the head that forms here sits in
layer 0 and copies from a fixed offset; the score, the label and the ablation treat it as the
tools define induction, by where it looks and what it is for.
"""

import random

import pytest
import torch
from conftest import train

from tinygpt.ablate import ablated
from tinygpt.checkpoint import read_checkpoint
from tinygpt.config import from_dict
from tinygpt.explain.heads import checkpoint_heads, induction_probes, loss
from tinygpt.explain.roles import THRESHOLDS
from tinygpt.explain.timeline import first_cleared
from tinygpt.snapshots import read_timeline

LETTERS = "abcdefghijklmnopqrst"
HALF = 16  # each string's length: half of block_size


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("induction")
    rng = random.Random(0)
    lines = []
    for _ in range(6000):
        s = "".join(rng.choice(LETTERS) for _ in range(HALF))
        lines.append(s + s)
    (root / "doubled.txt").write_text("\n".join(lines) + "\n")
    raw = {
        "model": {
            "n_layer": 2,
            "n_head": 2,
            "n_embd": 64,
            "block_size": 2 * HALF,
            "dropout": 0.0,
            "bias": False,
        },
        "data": {"corpus": str(root / "doubled.txt"), "val_fraction": 0.05},
        "train": {
            "batch_size": 64,
            "max_iters": 400,
            "learning_rate": 3e-3,
            "min_lr": 3e-4,
            "warmup_iters": 50,
            "eval_interval": 50,
            "eval_iters": 4,
            "log_interval": 50,
            "seed": 1,
            "device": "cpu",
            "dtype": "float32",
        },
        "out_dir": str(root / "run"),
    }
    train(from_dict(raw), progress=False)
    return root / "run"


def induction_scores(snapshot: dict) -> list[float]:
    return [h["scores"]["induction"] for h in snapshot["heads"]]


def test_the_timeline_shows_an_induction_head_forming_and_the_loss_falling_with_it(run):
    snapshots = read_timeline(run / "timeline.jsonl")
    threshold = THRESHOLDS["induction"]
    assert [s["step"] for s in snapshots] == list(range(0, 401, 50))
    assert max(induction_scores(snapshots[0])) < 0.1  # absent at step 0
    assert max(induction_scores(snapshots[-1])) > threshold  # present at the end
    assert any(h["label"] == "induction" for h in snapshots[-1]["heads"])

    formed = first_cleared(snapshots)["induction"]
    assert formed, "the timeline names the step at which a head first cleared the induction threshold"
    step, layer, head = formed[0]
    assert 0 < step <= 400
    at = [s["step"] for s in snapshots].index(step)
    before = snapshots[at - 1]
    assert (
        next(h for h in before["heads"] if (h["layer"], h["head"]) == (layer, head))["scores"]["induction"]
        < threshold
    )
    # the loss falls with it: half of every line is a copy, so predicting copies is most of the fall
    assert snapshots[at]["val_loss"] < before["val_loss"] - 0.1
    assert snapshots[-1]["val_loss"] < snapshots[0]["val_loss"] - 0.5  # from ln 21 ≈ 3.04


def test_heads_labels_the_induction_head_and_switching_it_off_costs_the_copies_only(run):
    heads = checkpoint_heads(run / "best.pt")
    labelled = [r for r in heads.reports if r.label == "induction"]
    assert labelled, "--heads labels a head induction"
    best = max(labelled, key=lambda r: r.scores["induction"])
    assert best.scores["induction"] > THRESHOLDS["induction"]

    model = read_checkpoint(run / "best.pt").build_model(run / "best.pt").eval()
    probes = induction_probes(model.config.vocab_size, model.config.block_size)  # (16, 32)
    with torch.no_grad():
        copies, originals = loss(model, probes, from_position=HALF), first_copy_loss(model, probes)
        with ablated(model, [(best.layer, best.head)]):
            copies_off, originals_off = (
                loss(model, probes, from_position=HALF),
                first_copy_loss(model, probes),
            )
    assert copies_off > copies + 1.0  # the copies get much harder to predict …
    assert abs(originals_off - originals) < 0.1 * originals  # … the random first copies barely move
    assert best.induction_loss == pytest.approx(copies_off, abs=1e-5)  # what the table reports


def first_copy_loss(model, probes: torch.Tensor) -> float:
    """Loss on the first copy's targets only (positions 0 … HALF − 2 predict characters 1 … HALF − 1)."""
    first = probes[:, :HALF]  # (N, HALF): the windows loss() reads, one character longer than predicted
    return loss(model, first)
