"""A checkpoint's proof of integrity, and a pickle read without running it.

- `digest`: sha256 over a canonical walk of the payload (sorted keys, each value tagged
  with its type, a tensor by dtype, shape and element bytes), stored in the payload:
  the same contents give the same digest, whatever torch.save's bytes.
- `seal`: the zip archive's comment holds a sha256 of every byte before it, so that a
  change to any byte shows, also to the bytes torch.load ignores (padding, the copies of
  each member's checksum, the directory's dates), which the digest cannot see.
- `pickle_imports`: the "module.name" a pickle would import, read opcode by opcode, so
  that a refused pickle can be told apart (`refusal`): one that would run code, or plain
  data in a protocol the safe loader does not read; `unreadable` says what else a file
  torch.load cannot read is (empty, truncated, not written by torch.save), and `absent`
  why there is no file to read at all.
"""

import ctypes
import hashlib
import os
import pickle
import pickletools
import zipfile
from pathlib import Path
from typing import Any

import torch


def digest(payload: dict[str, Any]) -> str:
    """sha256 over a canonical form of payload without its "digest": the same contents, the same digest.

    Not torch.save's bytes, which vary from save to save (the archive's serialization id): a
    walk of the contents in sorted key order, each value tagged with its type, a tensor by its
    dtype, shape and the bytes of its elements.
    """
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in payload.items() if k != "digest"})
    return h.hexdigest()


def _feed(h: "hashlib._Hash", value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"tensor {t.dtype} {tuple(t.shape)};".encode())
        if t.numel():  # the elements' bytes, read in place (NumPy may be absent)
            h.update(memoryview((ctypes.c_char * (t.numel() * t.element_size())).from_address(t.data_ptr())))
    elif isinstance(value, dict):
        h.update(f"dict {len(value)};".encode())
        for key in sorted(value, key=lambda k: (type(k).__name__, repr(k))):
            _feed(h, key)
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__} {len(value)};".encode())
        for item in value:
            _feed(h, item)
    else:  # None, bool, int, float, str, and any other plain value the safe loader gives
        text = repr(value).encode("utf-8", "backslashreplace")
        h.update(f"{type(value).__name__} {len(text)};".encode() + text)


SEAL = b"tinygpt sha256 "  # then the hex sha256 of every byte before it: the zip archive's comment


END_OF_ARCHIVE = b"PK\x05\x06"  # the zip's last record, 22 bytes, its last two the comment's length


SEAL_BROKEN = "its bytes do not match the seal at its end"
OTHER_ADVICE = "use another checkpoint, e.g. last.pt or best.pt of the run"


def seal(archive: bytearray) -> bytearray:
    """torch.save's archive with the seal as its comment, so that a change to any byte shows.

    The digest covers the contents, but torch.load ignores some of the archive's bytes (padding,
    the copy of each member's checksum, the directory's dates): the seal covers those too.
    """
    archive[-2:] = (len(SEAL) + 64).to_bytes(2, "little")  # the comment's length, torch.save's is 0
    archive += SEAL
    archive += hashlib.sha256(archive).hexdigest().encode()
    return archive


def seal_problem(path: Path) -> str | None:
    """What is wrong with the end of a file torch.load has read; None if intact, or never sealed."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 101))
        tail = f.read()
        if tail[-22:-18] == END_OF_ARCHIVE and tail[-2:] == b"\0\0":
            return None  # written by torch.save alone (before seals, or by hand): the digest still checks
        if (
            tail[:4] != END_OF_ARCHIVE
            or tail[-79:-64] != SEAL
            or tail[20:22] != (len(SEAL) + 64).to_bytes(2, "little")
        ):
            return "the end of its archive is not the seal tinygpt writes"
        f.seek(0)
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(min(1 << 20, size - 64 - f.tell())), b""):
            h.update(chunk)
    if h.hexdigest().encode() != tail[-64:]:
        return SEAL_BROKEN
    return None


def pickle_imports(pickled: bytes) -> list[str]:
    """Every "module.name" a pickle would import, read opcode by opcode (STACK_GLOBAL's from the memo too)."""
    names, strings, memo, last = [], [], {}, None
    for op, arg, _ in pickletools.genops(pickled):
        pushed = None
        if op.name in ("GLOBAL", "INST"):
            names.append(arg.replace(" ", "."))
        elif op.name == "STACK_GLOBAL":
            names.append(".".join(strings[-2:]))
        elif op.name == "MEMOIZE":
            memo[len(memo)] = last
        elif op.name.endswith("PUT"):
            memo[arg] = last
        elif op.name.endswith("GET"):
            pushed = memo.get(arg)
        elif isinstance(arg, str):
            pushed = arg
        if pushed is not None:
            strings.append(pushed)
        if op.name != "MEMOIZE" and not op.name.endswith("PUT"):  # a memo write leaves the stack as it was
            last = pushed
    return names


def refusal(path: Path, error: pickle.UnpicklingError, advice: str | None, kind: str = "checkpoint") -> str:
    """Why the safe loader refused the pickle: it would run code, it is in a form it does not read, or damage.

    The loader stops at the first opcode it does not know (protocol 4's FRAME, protocol 0's
    INST), before it sees what the pickle would import; the pickle is read here without running it.
    """
    if seal_problem(path) == SEAL_BROKEN:  # a file tinygpt wrote, damaged since
        return unreadable(path, advice, kind)
    try:
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl")
            names = pickle_imports(archive.read(name))
    except Exception:  # not an archive, or a pickle too damaged to read
        names = None
    if "GLOBAL" in str(error) or any(
        not (n.startswith("torch.") or n == "collections.OrderedDict") for n in names or ()
    ):
        return (
            f"refusing to load {path}: it holds Python objects that would run code "
            f"when unpickled, and a tinygpt {kind} holds only tensors and plain "
            "data; do not use this file"
        )
    if names is not None:
        return (
            f"{kind} {path} is pickled in a form the safe loader does not read (not torch.save's "
            "default protocol 2); save it again with torch.save, or use a best.pt or last.pt"
        )
    return unreadable(path, advice, kind)  # bytes that are not a pickle at all


def unreadable(path: Path, advice: str | None, kind: str = "checkpoint") -> str:
    """What a file torch.load cannot read is (empty, truncated, not torch.save's), said of a `kind`."""
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        problem = f"{kind} {path} is empty"
    elif head == b"PK\x03\x04":  # the start of torch.save's zip archive
        problem = f"{kind} {path} is truncated or corrupted and cannot be read"
    else:
        problem = f"{path} is not a tinygpt {kind} (not a file written by torch.save)"
        advice = advice or "pass a best.pt or last.pt"
    return f"{problem}; {advice or OTHER_ADVICE}"


def absent(path: Path) -> str | None:
    """Why there is no checkpoint file at path to read (nothing there, a dangling link, a directory),
    said with what to pass instead; None when there is a file."""
    if path.is_symlink() and not path.exists():
        return f"checkpoint {path} is a symbolic link to nothing (or a loop of links); pass a .pt file"
    if path.is_dir():
        return f"checkpoint {path} is a directory; pass a .pt file such as {path}/best.pt"
    if path.exists():
        return None
    beside = [n for n in ("best.pt", "last.pt") if (path.parent / n).is_file()]  # not a corpus's id cache
    if beside:
        return f"checkpoint {path} does not exist; {path.parent} holds {' and '.join(beside)}"
    return (
        f"checkpoint {path} does not exist; check the path: a run's checkpoints are its best.pt and "
        "last.pt, e.g. checkpoints/cpu/best.pt"
    )
