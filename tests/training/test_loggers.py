"""TensorBoard and W&B logging: what they hold, read back by their own readers, is metrics.jsonl's."""

import io
import json
import shutil
import struct
import sys
import time

import pytest
import torch
from conftest import need_extra, tiny_raw, train

from tinygpt.config.run_config import from_dict
from tinygpt.data.corpus import load_corpus
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.metrics import read_metrics
from tinygpt.files.snapshots import probe_of
from tinygpt.training.attention_image import DARK_BLUE, GAP, MASKED, SCALE, WHITE, attention_image
from tinygpt.training.loggers import evaluation_views, markdown_code

EVALUATED = ["loss/train", "loss/val", "learning_rate"]
SINCE_PREVIOUS = ["tokens_per_s", "grad_norm"]


def tensorboard_events(run):
    """Every scalar, text and image in a run's event files, by TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(
        str(run / "tensorboard"), size_guidance={"scalars": 0, "images": 0, "tensors": 0}
    )
    events.Reload()
    return events


def scalars(events, tag) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in events.Scalars(tag)]


def test_tensorboard_holds_metrics_jsonl_the_probe_attention_and_the_sample(
    corpus_file, tmp_path, one_thread
):
    need_extra("tensorboard", "tensorboard")
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=40, tensorboard=True)
    train(from_dict(raw), progress=False)
    run = tmp_path / "run"
    metrics = read_metrics(run / "metrics.jsonl")
    events = tensorboard_events(run)
    steps = [m["step"] for m in metrics]
    assert steps == [0, 20, 40]
    for tag, key in zip(EVALUATED, ["train_loss", "val_loss", "lr"], strict=True):
        logged = scalars(events, tag)
        assert [s for s, _ in logged] == steps
        assert [v for _, v in logged] == pytest.approx([m[key] for m in metrics], rel=1e-6)  # float32
    for tag in SINCE_PREVIOUS:  # none at step 0: nothing trained before it
        assert [s for s, _ in scalars(events, tag)] == [20, 40]
        assert all(0 < v < float("inf") for _, v in scalars(events, tag))

    # the last evaluation's pictures and sample are those of the model last.pt holds (step 40)
    model = read_checkpoint(run / "last.pt").build_model(run / "last.pt")
    corpus = load_corpus(from_dict(raw).data, model.config.block_size)
    probe = probe_of(corpus.tokenizer, corpus.val, model.config.block_size, "").view(1, -1)  # the timeline's
    sample_ids, attention = evaluation_views(model, probe)
    import numpy as np
    from PIL import Image

    for layer, weights in enumerate(attention):
        image = events.Images(f"attention/layer_{layer}")[-1]
        assert image.step == 40
        png = Image.open(io.BytesIO(image.encoded_image_string)).convert("RGB")
        pixels = torch.from_numpy(np.asarray(png).copy()).permute(2, 0, 1)  # (3, H, W)
        assert torch.equal(pixels, attention_image(weights))
    text = events.Tensors("sample/text_summary")[-1].tensor_proto.string_val[0].decode()
    assert text == markdown_code(corpus.tokenizer.decode(sample_ids))


def test_loggers_change_none_of_the_training_numbers(corpus_file, tmp_path, one_thread):
    """The sample has a generator of its own: the run's random state, so its batches and losses, stay."""
    need_extra("tensorboard", "tensorboard")
    logged, plain = (tiny_raw(corpus_file, tmp_path / name, max_iters=20) for name in ("logged", "plain"))
    logged["train"]["tensorboard"] = True
    train(from_dict(logged), progress=False)
    train(from_dict(plain), progress=False)
    without_time = [
        [
            {k: v for k, v in m.items() if k != "time_s"}
            for m in read_metrics(tmp_path / name / "metrics.jsonl")
        ]
        for name in ("logged", "plain")
    ]
    assert without_time[0] == without_time[1]
    assert torch.equal(
        read_checkpoint(tmp_path / "logged" / "last.pt").weights["wte.weight"],
        read_checkpoint(tmp_path / "plain" / "last.pt").weights["wte.weight"],
    )


def test_a_resumed_run_continues_the_event_log_with_every_step_once(corpus_file, tmp_path, one_thread):
    need_extra("tensorboard", "tensorboard")
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=40, tensorboard=True)
    run = tmp_path / "run"
    train(from_dict(raw), progress=False)  # steps 0, 20, 40
    kept = tmp_path / "last_at_40.pt"
    shutil.copy(run / "last.pt", kept)
    raw["train"]["max_iters"] = 60
    train(from_dict(raw), resume=True, progress=False)  # 60
    # as if the run had died after logging step 60 but before saving last.pt there
    shutil.copy(kept, run / "last.pt")
    train(from_dict(raw), resume=True, progress=False)  # 60 again, from last.pt at 40

    metrics = read_metrics(run / "metrics.jsonl")
    events = tensorboard_events(run)
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 3  # one file per run
    for tag, key in zip(EVALUATED, ["train_loss", "val_loss", "lr"], strict=True):
        logged = scalars(events, tag)
        assert [s for s, _ in logged] == [m["step"] for m in metrics] == [0, 20, 40, 60]
        assert [v for _, v in logged] == pytest.approx([m[key] for m in metrics], rel=1e-6)


def test_a_logger_without_its_package_is_a_user_error_before_any_work(corpus_file, tmp_path, monkeypatch):
    for package in ("tensorboard", "wandb"):
        monkeypatch.setitem(sys.modules, package, None)  # `import tensorboard` raises ImportError
        raw = tiny_raw(corpus_file, tmp_path / "run", **{package: True})
        with pytest.raises(UserError, match=rf"pip install 'tinygpt\[{package}\]'"):
            train(from_dict(raw), progress=False)
        assert not (tmp_path / "run").exists()


def test_an_attention_image_colours_each_weight_and_greys_the_future():
    weights = torch.tensor([[[1.0, 0.0], [0.25, 0.75]], [[1.0, 0.0], [1.0, 0.0]]])  # (nh 2, T 2, T 2)
    image = attention_image(weights)  # (3, H, W)
    assert tuple(image.shape) == (3, 2 * SCALE, 2 * (2 * SCALE + GAP) - GAP)

    def pixel(head, query, key):  # the middle of the weight's block
        x = head * (2 * SCALE + GAP) + key * SCALE + SCALE // 2
        return image[:, query * SCALE + SCALE // 2, x].tolist()

    assert pixel(0, 0, 0) == list(DARK_BLUE)
    assert pixel(0, 0, 1) == list(MASKED)  # query 0 cannot see key 1
    assert pixel(0, 1, 0) == [round(w + 0.25 * (d - w)) for w, d in zip(WHITE, DARK_BLUE, strict=True)]
    assert pixel(1, 1, 1) == list(WHITE)
    assert image[:, :, 2 * SCALE : 2 * SCALE + GAP].eq(255).all()  # the gap between the heads


# ------------------------------------------------------------------ Weights & Biases, offline


def wandb_records(path):
    """The records of a .wandb file (W&B's LevelDB-style log: 32 KiB blocks, 7-byte record headers)."""
    from wandb.proto import wandb_internal_pb2

    data, records, pending = path.read_bytes(), [], b""
    assert data[:4] == b":W&B"
    offset = 7  # the file's own header
    while offset + 7 <= len(data):
        if 32768 - offset % 32768 < 7:  # too little room left in the block for a header: padding
            offset += 32768 - offset % 32768
            continue
        length, kind = struct.unpack("<HB", data[offset + 4 : offset + 7])
        pending += data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(run_dir) -> list[dict]:
    """Every row the W&B runs under run_dir logged, in order: {key: value}."""
    rows = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        for record in wandb_records(path):
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {
                        "/".join(item.nested_key) or item.key: json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
    return rows


def settled_wandb_history(run_dir, rows: int, timeout: float = 120) -> list[dict]:
    """wandb_history once it holds `rows` rows, or as it stands after timeout seconds: on a busy machine
    W&B's service process can still be writing the last run's file when finish() has returned."""
    deadline = time.monotonic() + timeout
    while len(history := wandb_history(run_dir)) < rows and time.monotonic() < deadline:
        time.sleep(0.5)
    return history


@pytest.mark.slow  # W&B starts a service process of its own
def test_wandb_offline_run_holds_metrics_jsonl_and_resume_continues_the_same_run(
    corpus_file, tmp_path, monkeypatch, one_thread
):
    need_extra("wandb", "wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=20, wandb=True, wandb_run_name="tiny")
    run = tmp_path / "run"
    train(from_dict(raw), progress=False)
    run_id = (run / "wandb_id").read_text().strip()
    raw["train"]["max_iters"] = 40
    train(from_dict(raw), resume=True, progress=False)
    assert (run / "wandb_id").read_text().strip() == run_id
    assert [p.name.rsplit("-", 1)[1] for p in run.glob("wandb/offline-run-*")] == [run_id, run_id]

    metrics = read_metrics(run / "metrics.jsonl")
    rows = settled_wandb_history(run, len(metrics))
    assert [r["_step"] for r in rows] == [m["step"] for m in metrics] == [0, 20, 40]
    for row, m in zip(rows, metrics, strict=True):
        assert row["loss/train"] == pytest.approx(m["train_loss"], rel=1e-9)
        assert row["loss/val"] == pytest.approx(m["val_loss"], rel=1e-9)
        assert row["learning_rate"] == pytest.approx(m["lr"], rel=1e-9)
        for key in ("attention/layer_0", "attention/layer_1", "sample"):  # media files, beside the history
            (media,) = run.glob(f"wandb/offline-run-*/files/{row[key + '/path']}")
            assert media.stat().st_size == row[key + "/size"]
        assert "<pre>" in next(run.glob(f"wandb/offline-run-*/files/{row['sample/path']}")).read_text()
    assert all(row["grad_norm"] > 0 and row["tokens_per_s"] > 0 for row in rows[1:])


@pytest.mark.slow  # a torchrun job of two processes, and W&B's service process
def test_under_torchrun_only_rank_0_logs(corpus_file, tmp_path, monkeypatch):
    """One event file and one W&B run for the job, each holding every evaluation once."""
    from test_distributed import ROOT, torchrun

    need_extra("tensorboard", "tensorboard")
    need_extra("wandb", "wandb")
    monkeypatch.setenv("PYTHONPATH", "")  # both loggers need NumPy, which conftest hides from scripts
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    raw = tiny_raw(corpus_file, tmp_path / "run", batch_size=4, max_iters=40, tensorboard=True, wandb=True)
    job = torchrun(ROOT / "scripts" / "train.py", raw, tmp_path)
    assert job.returncode == 0, job.stderr

    run = tmp_path / "run"
    steps = [m["step"] for m in read_metrics(run / "metrics.jsonl")]
    assert steps == [0, 20, 40]
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert [s for s, _ in scalars(tensorboard_events(run), "loss/val")] == steps
    assert len(list(run.glob("wandb/offline-run-*"))) == 1
    assert [row["_step"] for row in wandb_history(run)] == steps
