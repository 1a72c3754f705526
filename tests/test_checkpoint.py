import errno
import io
import os
import pickle

import pytest
import torch

from tinygpt import GPT, CharTokenizer, GPTConfig, files, load_checkpoint
from tinygpt.checkpoint import FORMAT_VERSION, read_checkpoint, save_checkpoint
from tinygpt.errors import UserError

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
    save_checkpoint(payload(model), tmp_path / "m.pt")
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
    save_checkpoint(payload(GPT(CONFIG)), path)
    before = path.read_bytes()
    monkeypatch.setattr(files, "open", FillsUp, raising=False)  # the open() of the one atomic writer only
    with pytest.raises(
        UserError, match=r"cannot save checkpoint .*last.pt: No space left on device; the prev"
    ):
        save_checkpoint(payload(GPT(CONFIG)), path)
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
    save_checkpoint(payload(GPT(CONFIG)), good)
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
