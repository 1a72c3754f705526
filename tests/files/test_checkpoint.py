import errno
import io
import os
import pickle
import random
import re
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import tiny_raw, train
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinygpt import GPT, CharTokenizer, GPTConfig, load_checkpoint
from tinygpt.app.cli import main
from tinygpt.config.run_config import from_dict
from tinygpt.errors import UserError
from tinygpt.files import atomic as files
from tinygpt.files.checkpoint import (
    FORMAT_VERSION,
    Checkpoint,
    build_checkpoint,
    read_checkpoint,
    save_checkpoint,
    write_payload,
)
from tinygpt.files.integrity import digest

CONFIG = GPTConfig(vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=8)


def payload(model: GPT) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "model_config": vars(CONFIG),
        "model": model.state_dict(),
        "tokenizer": list("abcde"),
        "record": {"step": 3},
    }


def test_round_trip(tmp_path):
    torch.manual_seed(0)
    model = GPT(CONFIG)
    write_payload(payload(model), tmp_path / "m.pt")
    loaded, tok, record = load_checkpoint(tmp_path / "m.pt")
    assert isinstance(tok, CharTokenizer) and tok.chars == list("abcde") and record == {"step": 3}
    assert not loaded.training
    idx = torch.tensor([[0, 1, 2]])
    assert torch.equal(model.eval()(idx)[0], loaded(idx)[0])
    assert not [p for p in os.listdir(tmp_path) if p != "m.pt"]  # no temporary file left


class FillsUp(io.FileIO):
    """A file on a disk that fills up after `room` bytes."""

    room = 1000

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            super().write(bytes(data)[: self.room - self.tell()])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


def test_a_save_that_fills_the_disk_half_way_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    write_payload(payload(GPT(CONFIG)), path)
    before = path.read_bytes()
    monkeypatch.setattr(files, "open", FillsUp, raising=False)  # the open() of the one atomic writer only
    with pytest.raises(
        UserError, match=r"cannot save checkpoint .*last.pt: No space left on device; the prev"
    ):
        write_payload(payload(GPT(CONFIG)), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["last.pt"]  # the half-written temporary file is gone


class RunsCode:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_does_not_run(tmp_path):
    marker = tmp_path / "pwned"
    evil = RunsCode()
    evil.marker = marker
    path = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "model": evil}, path)
    with pytest.raises(UserError, match="would run code"):
        read_checkpoint(path)
    assert not marker.exists()
    plain = tmp_path / "evil.pkl"
    plain.write_bytes(pickle.dumps(evil))
    with pytest.raises(UserError, match="not a tinygpt checkpoint"):  # a bare pickle, not torch.save's format
        read_checkpoint(plain)
    assert not marker.exists()


class Opaque:  # an object of our own class: the safe loader will not import it
    pass


def test_an_object_of_a_class_is_refused_and_random_bytes_are_not_a_checkpoint(tmp_path):
    objects = tmp_path / "objects.pt"
    torch.save({"format_version": 1, "model": Opaque()}, objects)
    with pytest.raises(UserError, match="refusing to load .* would run code"):
        read_checkpoint(objects)
    noise = tmp_path / "noise.pt"
    noise.write_bytes(
        bytes(torch.randint(0, 256, (5000,), generator=torch.Generator().manual_seed(1)).tolist())
    )
    with pytest.raises(
        UserError, match=r"noise.pt is not a tinygpt checkpoint \(not a file written by torch.save\)"
    ):
        read_checkpoint(noise)


@pytest.mark.parametrize("cut", [0, 100, -100])
def test_truncated_or_empty_files(tmp_path, cut):
    good = tmp_path / "good.pt"
    write_payload(payload(GPT(CONFIG)), good)
    data = good.read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(data[:cut] if cut else b"")
    with pytest.raises(UserError, match="empty" if cut == 0 else "truncated or corrupted"):
        read_checkpoint(bad)


def test_not_a_checkpoint_newer_version_and_missing(tmp_path):
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    with pytest.raises(UserError, match="not a tinygpt checkpoint"):
        read_checkpoint(other)
    newer = tmp_path / "newer.pt"
    torch.save({**payload(GPT(CONFIG)), "format_version": FORMAT_VERSION + 1}, newer)
    with pytest.raises(UserError, match="newer than this tinygpt"):
        read_checkpoint(newer)
    text = tmp_path / "notes.txt"
    text.write_text("just some text")
    with pytest.raises(UserError, match="not a tinygpt checkpoint"):
        read_checkpoint(text)
    with pytest.raises(UserError, match="does not exist"):
        read_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(UserError, match="is a directory"):
        read_checkpoint(tmp_path)


def small_checkpoint(path, **changes) -> dict:
    """A real checkpoint as training writes it (build_checkpoint), with changes to its dict; written."""
    torch.manual_seed(0)
    saved = build_checkpoint(
        GPT(CONFIG), CharTokenizer("abcde"), {"model": {"n_layer": 1}}, {"step": 3, "val_loss": 1.5}
    ).to_payload()
    saved.update(changes)
    write_payload(saved, path)
    return saved


def test_each_of_20_random_byte_flips_is_refused_by_name(tmp_path):
    good = tmp_path / "best.pt"
    small_checkpoint(good)
    data = good.read_bytes()
    rng = random.Random(14)
    for _ in range(20):
        flipped = bytearray(data)
        at = rng.randrange(len(data))
        flipped[at] ^= 1 << rng.randrange(8)
        bad = tmp_path / f"flipped-at-{at}.pt"
        bad.write_bytes(flipped)
        with pytest.raises(UserError, match=f"checkpoint {re.escape(str(bad))} is "):
            load_checkpoint(bad)


def test_a_checkpoint_without_digest_or_seal_still_loads_and_the_digest_is_checked_without_seal(tmp_path):
    saved = small_checkpoint(tmp_path / "sealed.pt")
    old = tmp_path / "old.pt"
    torch.save(saved, old)  # as tinygpt wrote checkpoints before digests and seals: no digest, no seal
    model, _, record = load_checkpoint(old)
    assert record == {"step": 3, "val_loss": 1.5}
    assert torch.equal(model.wte.weight, saved["model"]["wte.weight"])
    edited = torch.load(tmp_path / "sealed.pt", weights_only=True)
    assert edited["digest"] == digest(saved) == digest(torch.load(tmp_path / "sealed.pt", weights_only=True))
    edited["model"]["h.0.attn.c_attn.weight"][0, 0] += 1  # changed, then saved without a new digest
    torch.save(edited, tmp_path / "edited.pt")
    with pytest.raises(UserError, match="edited.pt is damaged: its contents do not match the digest"):
        read_checkpoint(tmp_path / "edited.pt")


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_weights_are_refused_by_name(tmp_path, value):
    torch.manual_seed(0)
    model = GPT(CONFIG)
    with torch.no_grad():
        model.h[0].mlp.c_fc.weight[3, 1] = value
    write_payload(payload(model), tmp_path / "nan.pt")
    with pytest.raises(UserError, match=r"nan.pt holds non-finite weights \(NaN or infinity in h.0.mlp.c_fc"):
        load_checkpoint(tmp_path / "nan.pt")


def odd(key: str, value) -> dict:
    return {"model_config": {**vars(CONFIG), key: value}}


ODD_CONTENTS = {
    "dropout-2": (odd("dropout", 2.0), "model.dropout = 2.0 is not allowed"),
    "n-head-0": (odd("n_head", 0), "model.n_head = 0 is not allowed"),
    "n-embd-not-divisible": (odd("n_head", 3), "model.n_embd = 8 is not divisible by model.n_head = 3"),
    "vocab-size-a-string": (odd("vocab_size", "5"), "model_config.vocab_size = '5' is not an integer"),
    "bias-a-number": (odd("bias", 1), "model.bias = 1 is not allowed"),
    "model-config-none": ({"model_config": None}, "has no usable model config"),
    "model-config-missing-a-size": (
        {"model_config": {k: v for k, v in vars(CONFIG).items() if k != "n_layer"}},
        "has no usable model config",
    ),
    "vocabulary-duplicates": ({"tokenizer": list("abcda")}, "vocabulary has 4 distinct of 5"),
    "vocabulary-multi-character": ({"tokenizer": ["ab", "c", "d", "e", "f"]}, "not a list of single char"),
    "vocabulary-ints": ({"tokenizer": [0, 1, 2, 3, 4]}, "not a list of single characters"),
    "vocabulary-too-short": ({"tokenizer": list("abcd")}, "4 distinct of 4 characters for a model of 5"),
    "record-a-list": ({"record": [3]}, "training record is not a mapping"),
    "record-nan": ({"record": {"step": 3, "val_loss": float("nan")}}, "training record is not a mapping"),
    "record-nested": ({"record": {"step": [3]}}, "training record is not a mapping"),
    "model-a-list": ({"model": [torch.zeros(1)]}, "model is not a mapping of names to tensors"),
    "weights-not-tensors": ({"model": {"wte.weight": 1.0}}, "model is not a mapping of names to tensors"),
    "embedding-wrong-shape": (
        {"model": {**GPT(CONFIG).state_dict(), "wte.weight": torch.zeros(6, 8)}},
        r"wte.weight is \(6, 8\), not \(5, 8\)",
    ),
    "layer-weight-wrong-shape": (
        {"model": {**GPT(CONFIG).state_dict(), "h.0.mlp.c_fc.weight": torch.zeros(3, 8)}},
        "does not hold a matching model",
    ),
    "a-layer-too-many": (
        {"model_config": {**vars(CONFIG), "n_layer": 2}},
        "holds 1 layers of weights for n_layer 2",
    ),
    "optimizer-a-string": ({"optimizer": "adam"}, "its optimizer is str, not dict"),
    "format-version-a-string": ({"format_version": "1"}, "format version '1', which is not a valid version"),
    "format-version-0": ({"format_version": 0}, "format version 0, which is not a valid version"),
}


@pytest.mark.parametrize("changes, message", ODD_CONTENTS.values(), ids=list(ODD_CONTENTS))
def test_odd_contents_the_safe_loader_accepts_are_refused_naming_the_file(tmp_path, changes, message):
    path = tmp_path / "odd.pt"
    small_checkpoint(path, **changes)
    with pytest.raises(UserError, match=f"checkpoint {re.escape(str(path))}[ :].*{message}"):
        load_checkpoint(path)


def test_missing_and_unknown_entries_are_refused(tmp_path):
    saved = small_checkpoint(tmp_path / "good.pt")
    del saved["tokenizer"]
    write_payload(saved, tmp_path / "missing.pt")
    with pytest.raises(UserError, match="missing.pt is incomplete: missing tokenizer"):
        read_checkpoint(tmp_path / "missing.pt")
    write_payload({**small_checkpoint(tmp_path / "good.pt"), "extra": 1}, tmp_path / "extra.pt")
    with pytest.raises(UserError, match=r"extra.pt is damaged: it holds unknown entries \('extra'\)"):
        read_checkpoint(tmp_path / "extra.pt")


@pytest.mark.parametrize("protocol", [0, 4], ids=["protocol-0", "protocol-4"])
def test_a_pickle_that_runs_code_in_any_protocol_is_called_so(tmp_path, protocol):
    marker = tmp_path / "pwned"
    evil = RunsCode()
    evil.marker = marker
    for obj in (evil, Opaque()):
        path = tmp_path / "evil.pt"
        torch.save({"format_version": 1, "model": obj}, path, pickle_protocol=protocol)
        with pytest.raises(UserError, match="refusing to load .* would run code"):
            read_checkpoint(path)
    assert not marker.exists()
    plain = tmp_path / "plain.pt"
    torch.save({"format_version": 1, "model": {"w": torch.zeros(2)}}, plain, pickle_protocol=protocol)
    with pytest.raises(UserError, match="plain.pt is pickled in a form the safe loader does not read"):
        read_checkpoint(plain)


PLAIN_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2**70),
    st.floats(),
    st.text(max_size=3),
    st.lists(st.one_of(st.integers(-1, 9), st.text(max_size=2)), max_size=6),
    st.dictionaries(st.text(max_size=6), st.integers(-1, 9), max_size=3),
)
PLACES = [
    ("format_version",),
    ("tokenizer",),
    ("record",),
    ("config",),
    ("new entry",),
    *[("model_config", k) for k in (*vars(CONFIG), "unknown")],
    *[("tokenizer", i) for i in range(5)],
    *[("record", k) for k in ("step", "val_loss", "other")],
]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(st.sampled_from(PLACES), PLAIN_VALUES), min_size=1, max_size=3))
def test_a_checkpoint_with_plain_data_mutated_loads_and_runs_or_is_a_user_error(changes):
    saved = {**payload(GPT(CONFIG)), "config": {"model": {}}}
    saved["model_config"], saved["tokenizer"] = dict(saved["model_config"]), list(saved["tokenizer"])
    for place, value in changes:
        *inside, last = place
        target = saved[inside[0]] if inside else saved
        if isinstance(target, dict) or (
            isinstance(target, list) and isinstance(last, int) and last < len(target)
        ):
            target[last] = value
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "fuzzed.pt"
        write_payload(saved, path)
        try:
            model, tokenizer, _ = load_checkpoint(path)
        except UserError as e:
            assert str(path) in str(e)
        else:
            logits, _ = model(torch.tensor([[tokenizer.vocab_size - 1]]))
            assert torch.isfinite(logits).all()


def version_1_payload(checkpoint: Checkpoint) -> dict:
    """The dict tinygpt wrote for these contents before the typed Checkpoint (format version 1), as its
    build_payload did: rank 0's random states in rng, every rank's in rank_rng when there were several."""
    payload = {
        "format_version": 1,
        "model_config": checkpoint.model_config,
        "model": checkpoint.weights,
        "tokenizer": checkpoint.chars,
        "config": checkpoint.config,
        "record": checkpoint.record,
    }
    if checkpoint.optimizer is not None:
        payload["optimizer"] = checkpoint.optimizer
    if checkpoint.rng is not None:
        payload["rng"] = checkpoint.rng[0]
        if len(checkpoint.rng) > 1:
            payload["rank_rng"] = checkpoint.rng
    return payload


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_version_1_file_reads_as_the_same_checkpoint_in_the_current_layout(tmp_path, ranks):
    torch.manual_seed(0)
    states = [
        {"torch": torch.get_rng_state(), "batches": torch.Generator().manual_seed(rank).get_state()}
        for rank in range(ranks)
    ]
    optimizer = {"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    current = build_checkpoint(
        GPT(CONFIG), CharTokenizer("abcde"), {"model": {"n_layer": 1}}, {"step": 3}, optimizer, states
    )
    write_payload(version_1_payload(current), tmp_path / "old.pt")
    assert torch.load(tmp_path / "old.pt", weights_only=True)["format_version"] == 1
    old = read_checkpoint(tmp_path / "old.pt")
    assert old.format_version == 1 and FORMAT_VERSION == 3
    assert len(old.rng) == ranks
    assert digest(old.to_payload()) == digest(current.to_payload())  # every entry the same, rng as a list
    save_checkpoint(old, tmp_path / "again.pt")  # written again: in the current layout
    assert torch.load(tmp_path / "again.pt", weights_only=True)["format_version"] == FORMAT_VERSION


def test_a_checkpoint_saved_and_read_keeps_every_field(tmp_path):
    torch.manual_seed(0)
    states = [{"torch": torch.get_rng_state()}]
    saved = build_checkpoint(
        GPT(CONFIG), CharTokenizer("abcde"), {"train": {"seed": 1}}, {"step": 3}, {}, states
    )
    save_checkpoint(saved, tmp_path / "m.pt")
    read = read_checkpoint(tmp_path / "m.pt")
    assert digest(read.to_payload()) == digest(saved.to_payload())
    assert (
        read.step == 3 and read.tokenizer.chars == list("abcde") and read.run_section("train") == {"seed": 1}
    )
    assert read.run_section("data") is None and read.optimizer == {}


def test_a_run_saved_in_version_1_samples_inspects_explains_evaluates_exports_and_resumes(
    corpus_file, tmp_path, capsys
):
    raw = tiny_raw(corpus_file, tmp_path / "run", max_iters=10, eval_interval=5)
    train(from_dict(raw), progress=False)
    run = tmp_path / "run"
    for name in ("best.pt", "last.pt"):  # as the code before the typed Checkpoint wrote them
        write_payload(version_1_payload(read_checkpoint(run / name)), run / name)
    best = str(run / "best.pt")
    assert main(["sample", "--checkpoint", best, "--max-new-tokens", "5", "--device", "cpu"]) == 0
    assert main(["inspect", best]) == 0
    assert "(format version 1)" in capsys.readouterr().out
    assert main(["explain", best]) == 0
    assert main(["evaluate", best, "--quiet", "--device", "cpu"]) == 0
    assert main(["export", best, str(tmp_path / "exported"), "--format", "safetensors"]) == 0
    raw["train"]["max_iters"] = 15
    assert train(from_dict(raw), resume=True, progress=False)["step"] == 15
    assert read_checkpoint(run / "last.pt").format_version == FORMAT_VERSION
