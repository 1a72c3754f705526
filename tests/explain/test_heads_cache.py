"""The head scores kept beside a checkpoint: read back when nothing they depend on changed, else scored
again; a damaged file is scored again, never an error."""

import shutil

import pytest
import torch

from tinygpt.explain import heads as scoring
from tinygpt.explain.heads import checkpoint_heads
from tinygpt.explain.heads_cache import CACHE_DIR
from tinygpt.explain.inspected import Inspected
from tinygpt.files.checkpoint import read_checkpoint


@pytest.fixture
def run(odd_checkpoint, tmp_path):
    """A copy of the odd run's best.pt in a directory of its own (its config still names the corpus)."""
    shutil.copy(odd_checkpoint, tmp_path / "best.pt")
    return tmp_path / "best.pt"


def scored(monkeypatch) -> list[int]:
    """Counts the times head_reports runs from now on."""
    calls, real = [], scoring.head_reports

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(scoring, "head_reports", counted)
    return calls


def test_scores_are_kept_beside_the_checkpoint_and_read_back_the_same(run, monkeypatch):
    calls = scored(monkeypatch)
    first = checkpoint_heads(run)
    kept = list((run.parent / CACHE_DIR).glob("heads.*.pt"))
    assert len(kept) == 1 and len(calls) == 1
    again = checkpoint_heads(run)
    assert len(calls) == 1, "read back, not scored again"
    assert again == first
    checkpoint_heads(run, windows=3)  # other settings: another key
    assert len(calls) == 2 and len(list((run.parent / CACHE_DIR).glob("heads.*.pt"))) == 2


def test_a_damaged_or_foreign_file_is_scored_again_and_written_over(run, monkeypatch):
    calls = scored(monkeypatch)
    first = checkpoint_heads(run)
    (kept,) = (run.parent / CACHE_DIR).glob("heads.*.pt")
    kept.write_bytes(kept.read_bytes()[:100])  # truncated
    assert checkpoint_heads(run) == first and len(calls) == 2
    torch.save({"key": "another", "heads": {}}, kept)  # another key's contents under this name
    assert checkpoint_heads(run) == first and len(calls) == 3
    torch.save({"key": kept.name.split(".")[1], "heads": {"reports": "nonsense"}}, kept)
    assert checkpoint_heads(run) == first and len(calls) == 4


def test_changed_weights_are_scored_again_and_hooks_are_never_kept(run, monkeypatch):
    saved = read_checkpoint(run)
    looked = Inspected(run, saved, saved.build_model(run).eval())
    calls = scored(monkeypatch)
    before = looked.heads()
    assert looked.heads() is before and len(calls) == 1, "remembered for the same weights"
    with torch.no_grad():
        looked.model.h[1].attn.c_proj.weight.mul_(0.0)  # in place: the same tensors, other values
    after = looked.heads()
    assert len(calls) == 2 and after.reports[2].importance != before.reports[2].importance
    with looked.model.hooks({"blocks.0.attn.z": lambda z, name: z * 0}):
        looked.heads()
        looked.heads()
    assert len(calls) == 4, "with hooks attached, scored every time"
    fresh = Inspected(run, saved, saved.build_model(run).eval())
    assert fresh.heads() == before and len(calls) == 4, "the file holds the checkpoint's own weights' scores"
