"""out_dir values that no file system takes, or that point nowhere: one clear error each, nothing written."""

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import tiny_raw, train

from tinygpt.app.cli import main
from tinygpt.config.run_config import from_dict
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.training.run_dir import checked_path
from tinygpt.training.set_up import Setup


@pytest.mark.parametrize(
    "out_dir, message",
    [
        ("runs/a\x00b", "holds a NUL character"),
        ("runs/\udcff", "not valid text"),
        ("runs/" + "x" * 256, "longer than 255 bytes"),
    ],
    ids=["nul", "lone-surrogate", "name-too-long"],
)
def test_an_out_dir_no_file_system_takes_is_refused_before_anything_is_written(
    corpus_file, tmp_path, monkeypatch, out_dir, message
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=message):
        train(
            from_dict(tiny_raw(corpus_file, Path("unused"), max_iters=2) | {"out_dir": out_dir}),
            progress=False,
        )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("link_to", ["nowhere", "loop"])
def test_an_out_dir_that_is_a_link_to_nothing_is_refused(corpus_file, tmp_path, link_to):
    link = tmp_path / "run"
    os.symlink(tmp_path / "missing" if link_to == "nowhere" else link, link)
    with pytest.raises(UserError, match="symbolic link to nothing"):
        train(from_dict(tiny_raw(corpus_file, link, max_iters=2)), progress=False)
    assert link.is_symlink() and not (tmp_path / "missing").exists()


def test_a_tilde_in_out_dir_is_the_home_directory_as_for_the_corpus(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert checked_path("~/runs/a") == tmp_path / "runs" / "a"


@pytest.mark.parametrize("name", ["config.yaml", "lock", "metrics.jsonl", "best.pt"])
def test_a_symlink_in_the_run_directory_is_replaced_never_written_through(corpus_file, tmp_path, name):
    """A link planted as one of the run's files: training writes the file, the link's target is untouched.
    (A best.pt is a run's work, which a new run refuses to replace: the target is untouched too.)"""
    outside = tmp_path / "precious.txt"
    outside.write_text("not yours")
    run = tmp_path / "run"
    run.mkdir()
    (run / name).symlink_to(outside)
    config = from_dict(tiny_raw(corpus_file, run, max_iters=20))
    if name == "best.pt":
        with pytest.raises(UserError, match=r"holds a run's best.pt \(which does not read\) but no last.pt"):
            train(config, progress=False)
    else:
        train(config, progress=False)
        assert not (run / name).is_symlink()
    assert outside.read_text() == "not yours"


def test_resuming_a_copied_runs_own_config_resumes_the_copy_and_leaves_the_original(
    corpus_file, tmp_path, capsys
):
    """cp -r run copy; train --config copy/config.yaml --resume: the copy goes on, the original stays."""
    original = tmp_path / "run"
    train(from_dict(tiny_raw(corpus_file, original, max_iters=20)), progress=False)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    before = (original / "last.pt").read_bytes()
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["train"]["max_iters"] = 40
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(copy / "config.yaml"), "--resume", "--quiet"]) == 0
    assert read_checkpoint(copy / "last.pt").record["step"] == 40
    assert (original / "last.pt").read_bytes() == before
    note = f"note: resuming {copy}, whose config.yaml this is (it was written for {original})"
    assert note in capsys.readouterr().err


def test_a_run_without_last_pt_is_never_overwritten_and_resumes_from_best_pt(corpus_file, tmp_path, capsys):
    """best.pt, metrics and a timeline but no last.pt (removed, or left by an older tinygpt stopped twice):
    a new run there is refused, leaving every file as it was; --resume goes on from best.pt's weights."""
    run = tmp_path / "run"
    raw = tiny_raw(corpus_file, run, max_iters=40)
    train(from_dict(raw), progress=False)
    (run / "last.pt").unlink()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    best_step = read_checkpoint(run / "best.pt").step
    config = str(run / "config.yaml")
    assert main(["train", "--config", config, "--quiet"]) == 2
    error = capsys.readouterr().err
    assert f"holds a run's best.pt (step {best_step}), metrics.jsonl (3 evaluations, to step 40)" in error
    assert "but no last.pt; add --resume to continue from best.pt's weights, or start a new run" in error
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    raw["train"]["max_iters"] = 60
    config = tmp_path / "longer.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["train", "--config", str(config), "--resume", "--quiet"]) == 0
    assert f"resuming from best.pt (step {best_step}): its weights" in capsys.readouterr().err
    assert read_checkpoint(run / "last.pt").step == 60
    steps = [json.loads(line)["step"] for line in open(run / "metrics.jsonl")]
    assert steps == [s for s in (0, 20, 40) if s <= best_step] + [s for s in (20, 40, 60) if s > best_step]


def test_a_run_killed_in_its_first_evaluation_is_started_again_and_resumable_after_it(
    corpus_file, tmp_path, monkeypatch
):
    """config.yaml and step 0's evaluation (of the untrained model) are no work to keep: a new run takes
    the directory; and from step 0's evaluation on, last.pt is there to resume from."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("left: by a killed run\n")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "val_loss": 4.0}) + "\n")
    config = from_dict(tiny_raw(corpus_file, run, max_iters=20))

    def dies(self, step):
        raise SystemExit("killed in the first step")

    monkeypatch.setattr(Setup, "step", dies)
    with pytest.raises(SystemExit):
        train(config, progress=False)
    assert read_checkpoint(run / "last.pt").step == 0
    monkeypatch.undo()
    assert train(config, resume=True, progress=False)["step"] == 20
    assert [json.loads(line)["step"] for line in open(run / "metrics.jsonl")] == [0, 20]
