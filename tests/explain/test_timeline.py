"""The timeline: a snapshot per evaluation in the documented format, held to the model's own numbers;
rewound on --resume; written from checkpoints for a run that recorded none; read in the terminal."""

import json
import shutil

import pytest
import torch
from conftest import tiny_raw, train

from tinygpt.app.cli import main
from tinygpt.config.run_config import from_dict
from tinygpt.errors import UserError
from tinygpt.explain.roles import ROLES
from tinygpt.explain.timeline import SAMPLE_LENGTH, first_cleared, page_timeline, timeline_table
from tinygpt.files.checkpoint import load_checkpoint
from tinygpt.files.metrics import read_metrics
from tinygpt.files.snapshots import FILE_NAME, PROBE_LENGTH, read_timeline

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: extra threads only wait on each other

KEYS = {"step", "train_loss", "val_loss", "repeat_loss", "probe", "heads", "attention", "top5", "sample"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny run of 40 steps, evaluated every 20, with its timeline (block 64, so the probe is 48 long)."""
    from conftest import make_corpus

    root = tmp_path_factory.mktemp("timeline")
    corpus = root / "corpus.txt"
    corpus.write_text(make_corpus(), encoding="utf-8")
    raw = tiny_raw(corpus, root / "run", max_iters=40)
    raw["model"]["block_size"] = 64
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as one_thread does, for this fixture too
    try:
        train(from_dict(raw), progress=False)
    finally:
        torch.set_num_threads(before)
    return root / "run"


def test_each_evaluation_appends_one_snapshot_in_the_documented_format(run):
    snapshots = read_timeline(run / FILE_NAME)
    metrics = read_metrics(run / "metrics.jsonl")
    assert [s["step"] for s in snapshots] == [m["step"] for m in metrics] == [0, 20, 40]
    for snapshot, entry in zip(snapshots, metrics, strict=True):
        assert set(snapshot) == KEYS
        assert (snapshot["train_loss"], snapshot["val_loss"]) == (entry["train_loss"], entry["val_loss"])
        assert [(h["layer"], h["head"]) for h in snapshot["heads"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert all(set(h["scores"]) == set(ROLES) for h in snapshot["heads"])
        assert len(snapshot["probe"]) == PROBE_LENGTH
        assert len(snapshot["sample"]) == SAMPLE_LENGTH
    text = (run.parent / "corpus.txt").read_text()
    val = text[int(len(text) * 0.9) :]
    assert snapshots[0]["probe"] == val[val.index("\n") + 1 :][:PROBE_LENGTH]  # from the first line start
    assert snapshots[0]["attention"] != snapshots[-1]["attention"]
    assert snapshots[0]["sample"] != snapshots[-1]["sample"]


def test_the_last_snapshot_holds_the_models_own_attention_and_predictions(run):
    """last.pt holds step 40's weights: its attention and top-5 on the probe are the snapshot's, rounded."""
    snapshot = read_timeline(run / FILE_NAME)[-1]
    model, tokenizer, record = load_checkpoint(run / "last.pt")
    assert record["step"] == snapshot["step"]
    ids = torch.tensor([tokenizer.encode(snapshot["probe"])])  # (1, P)
    with torch.no_grad():
        logits, found = model.run_with_cache(ids, names=["blocks.*.attn.pattern"])
    for layer in range(model.config.n_layer):
        for head in range(model.config.n_head):
            weights = found[f"blocks.{layer}.attn.pattern"][0, head]  # (P, P)
            stored = snapshot["attention"][layer][head]
            assert [len(row) for row in stored] == list(range(1, len(ids[0]) + 1))  # row i: i + 1 weights
            for i, row in enumerate(stored):
                assert row == pytest.approx(weights[i, : i + 1].tolist(), abs=5e-5)
    probs = torch.softmax(logits[0], dim=-1)  # (P, vocab)
    for position, pairs in enumerate(snapshot["top5"]):
        best = torch.topk(probs[position], 5)
        assert [c for c, _ in pairs] == [tokenizer.chars[i] for i in best.indices.tolist()]
        assert [p for _, p in pairs] == pytest.approx(best.values.tolist(), abs=5e-5)


def test_timeline_off_writes_none(corpus_file, tmp_path):
    train(from_dict(tiny_raw(corpus_file, tmp_path / "run", max_iters=10, timeline=False)), progress=False)
    assert not (tmp_path / "run" / FILE_NAME).exists()
    assert read_metrics(tmp_path / "run" / "metrics.jsonl")


def test_a_chosen_probe_is_recorded_and_a_bad_one_is_refused(corpus_file, tmp_path):
    probe = "KING:\nThe fool"
    train(from_dict(tiny_raw(corpus_file, tmp_path / "a", max_iters=5, timeline_probe=probe)), progress=False)
    (snapshot,) = [s for s in read_timeline(tmp_path / "a" / FILE_NAME) if s["step"] == 5]
    assert snapshot["probe"] == probe and len(snapshot["attention"][0][0]) == len(probe)
    with pytest.raises(
        UserError, match=r"train.timeline_probe holds characters that are not in the corpus \('Z'"
    ):
        train(from_dict(tiny_raw(corpus_file, tmp_path / "b", timeline_probe="ZEBRA")), progress=False)
    with pytest.raises(
        UserError, match="train.timeline_probe has 17 characters, more than model.block_size = 16"
    ):
        train(
            from_dict(tiny_raw(corpus_file, tmp_path / "c", timeline_probe="the king and thee")),
            progress=False,
        )


def test_resume_rewinds_the_timeline_to_last_pt_so_no_step_is_there_twice_or_missing(
    corpus_file, tmp_path, capsys
):
    """A run that died after logging step 30 but before saving it (then mid-line) resumes cleanly."""
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=20, eval_interval=10)
    train(from_dict(raw), progress=False)
    path = tmp_path / "run" / FILE_NAME
    stale = {**read_timeline(path)[-1], "step": 30, "sample": "logged by the run that died"}
    with open(path, "a") as f:
        f.write(json.dumps(stale) + "\n" + '{"step": 40, "train_lo')  # then it was killed mid-line
    raw["train"]["max_iters"] = 40
    train(from_dict(raw), resume=True, progress=False)
    snapshots = read_timeline(path)
    assert [s["step"] for s in snapshots] == [0, 10, 20, 30, 40]
    assert snapshots[3]["sample"] != stale["sample"]  # step 30 recorded again, by the resumed run
    assert "was torn" in capsys.readouterr().err


def test_from_checkpoints_writes_what_training_would_have_recorded(corpus_file, tmp_path, capsys):
    """The same run trained twice, with and without a timeline: the snapshots written from the
    second's checkpoints equal the first's at those steps."""
    recorded, bare = tmp_path / "recorded", tmp_path / "bare"
    for out, on in ((recorded, True), (bare, False)):
        raw = tiny_raw(corpus_file, out, max_iters=20, timeline=on)
        train(from_dict(raw), progress=False)
        if not on:
            shutil.copyfile(out / "last.pt", out / "step20.pt")  # any *.pt counts
        raw["train"]["max_iters"] = 40
        train(from_dict(raw), resume=True, progress=False)
    capsys.readouterr()  # what training printed
    assert main(["inspect", str(bare), "--timeline", "--from-checkpoints"]) == 0
    out, err = capsys.readouterr()
    written = read_timeline(bare / FILE_NAME)
    assert f"wrote {bare / FILE_NAME}: 2 snapshots from its checkpoints" in err  # step20.pt; best and last
    assert [s["step"] for s in written] == [20, 40]
    by_step = {s["step"]: s for s in read_timeline(recorded / FILE_NAME)}
    for snapshot in written:
        assert snapshot == by_step[snapshot["step"]]
    assert out.startswith("   step  train    val repeat  0.0")
    assert main(["inspect", str(bare), "--timeline", "--from-checkpoints"]) == 2
    assert "already holds a timeline; --from-checkpoints writes one for a run that recorded none" in (
        capsys.readouterr().err
    )


def snapshot_with(step: int, induction: list[float]) -> dict:
    """A snapshot whose four heads score 0.05 on every role but induction."""
    heads = []
    for n, score in enumerate(induction):
        scores = {role: 0.05 for role in ROLES} | {"induction": score}
        heads.append({"layer": n // 2, "head": n % 2, "scores": scores, "label": ""})
    return {"step": step, "train_loss": 2.0, "val_loss": 2.1, "probe": "ab\n", "heads": heads}


def test_the_table_gives_each_heads_dominant_role_and_the_step_each_role_first_cleared():
    snapshots = [
        snapshot_with(0, [0.1, 0.1, 0.1, 0.1]),
        snapshot_with(100, [0.1, 0.1, 0.45, 0.3]),
        snapshot_with(200, [0.1, 0.1, 0.7, 0.5]),
    ]
    assert first_cleared(snapshots)["induction"] == [(100, 1, 0), (200, 1, 1)]
    assert first_cleared(snapshots)["previous"] == []
    lines = timeline_table(snapshots).splitlines()
    assert lines[0].split() == ["step", "train", "val", "0.0", "0.1", "1.0", "1.1"]
    assert lines[2].split()[3:] == ["induct", "0.10", "induct", "0.10", "induct*0.45", "induct", "0.30"]
    assert "  induction  (≥ 0.4) head 1.0 at step 100, head 1.1 at step 200" in lines
    assert "  previous   (≥ 0.5) by no head" in lines
    assert lines[-1] == "probe: ab↵"  # a newline shown as every view shows it, not as \\n


def test_the_table_shows_the_loss_where_the_text_repeats_where_the_timeline_measured_it():
    snapshots = [snapshot_with(0, [0.1] * 4) | {"repeat_loss": None}, snapshot_with(100, [0.1] * 4)]
    snapshots[1]["repeat_loss"] = 0.42
    lines = timeline_table(snapshots).splitlines()
    assert lines[0].split()[:4] == ["step", "train", "val", "repeat"]
    assert lines[1].split()[:4] == ["0", "2.000", "2.100", "-"]  # no window repeated itself
    assert lines[2].split()[:4] == ["100", "2.000", "2.100", "0.420"]


def test_a_timeline_recorded_before_a_role_existed_is_shown_with_the_roles_it_has(tmp_path):
    """Round 2 added line_start; a timeline.jsonl from before it reads, tables and pages as it was."""
    old = [snapshot_with(0, [0.1] * 4), snapshot_with(100, [0.1, 0.1, 0.45, 0.3])]
    for snapshot in old:
        for h in snapshot["heads"]:
            del h["scores"]["line_start"]
    (tmp_path / FILE_NAME).write_text("".join(json.dumps(s) + "\n" for s in old))
    assert page_timeline(tmp_path)["roles"] == [r for r in ROLES if r != "line_start"]
    table = timeline_table(read_timeline(tmp_path / FILE_NAME))
    assert "  induction  (≥ 0.4) head 1.0 at step 100" in table.splitlines()
    assert "line_start" not in table


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from-checkpoints"], "--from-checkpoints writes the --timeline of a run that recorded none"),
        (["--timeline", "--heads"], "--timeline is a view of its own"),
    ],
)
def test_mistakes_with_the_timeline_are_one_line(run, capsys, args, message):
    assert main(["inspect", str(run / "best.pt"), *args]) == 2
    assert message in capsys.readouterr().err


def test_inspect_timeline_reads_the_run_or_says_how_to_get_one(run, corpus_file, tmp_path, capsys):
    assert main(["inspect", str(run), "--timeline"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [row.split()[0] for row in rows[1:4]] == ["0", "20", "40"]
    train(from_dict(tiny_raw(corpus_file, tmp_path / "bare", max_iters=5, timeline=False)), progress=False)
    assert main(["inspect", str(tmp_path / "bare" / "best.pt"), "--timeline"]) == 2
    assert (
        "has no timeline (timeline.jsonl): it was trained with train.timeline off" in capsys.readouterr().err
    )
    assert (
        main(["inspect", str(corpus_file), "--timeline"]) == 2
    )  # a file that is no checkpoint: not its folder
    assert f"{corpus_file} is neither a run directory nor a checkpoint (.pt)" in capsys.readouterr().err


def test_a_score_just_below_its_threshold_is_not_shown_at_it():
    """0.4996 once showed as 0.50 beside "(≥ 0.5)" without the mark: the table rounds down, so a score
    shown at its threshold has reached it and one below shows below."""
    snapshots = [snapshot_with(0, [0.3996, 0.4, 0.29, 0.4449])]
    cells = timeline_table(snapshots).splitlines()[1].split()[3:]
    assert cells == ["induct", "0.39", "induct*0.40", "induct", "0.29", "induct*0.44"]
    assert first_cleared(snapshots)["induction"] == [(0, 0, 1), (0, 1, 1)]


def test_from_checkpoints_counts_one_snapshot_in_the_singular(corpus_file, tmp_path, capsys):
    train(from_dict(tiny_raw(corpus_file, tmp_path / "bare", max_iters=20, timeline=False)), progress=False)
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "bare"), "--timeline", "--from-checkpoints"]) == 0
    assert (
        f"wrote {tmp_path / 'bare' / FILE_NAME}: 1 snapshot from its checkpoints\n" in capsys.readouterr().err
    )
