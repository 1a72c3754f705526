"""metrics.jsonl: one JSON object per line, appended as each evaluation finishes.

Each entry goes to the end of the file in one write of one whole line, so a
process that dies at any moment leaves every earlier line intact and at worst
a torn last line, which `read_metrics` skips with a note and the next append
removes first. A write cut short (a full disk) is an error, and the part of the
line it wrote is removed, so no torn line is ever followed by another. On
--resume the file is cut back to the step of last.pt, so entries a dead run
logged after its last checkpoint are not logged twice.
"""

import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

from tinygpt.errors import UserError, shown
from tinygpt.files.atomic import write_atomic


def append_metrics(path: str | Path, entry: dict[str, Any]) -> None:
    """Append one entry as one line, after removing a torn last line if a crash left one."""
    line = (json.dumps(entry) + "\n").encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _drop_torn_end(fd, path)
            written = os.write(fd, line)  # one write of the whole line: never interleaved
            if written < len(line):
                os.ftruncate(fd, os.fstat(fd).st_size - written)
                raise OSError(errno.ENOSPC, f"wrote {written} of {len(line)} bytes, removed again")
        finally:
            os.close(fd)
    except OSError as e:
        raise UserError(
            f"cannot append to {path}: {e.strerror}; free some space or fix permissions"
        ) from None


def _drop_torn_end(fd: int, path: str | Path) -> None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    os.ftruncate(fd, os.pread(fd, size, 0).rfind(b"\n") + 1)
    _note_torn(path, "its last line")


def _note_torn(path: str | Path, where: str) -> None:
    print(f"note: {shown(path)}: {where} was torn (its writer stopped mid-line); dropped", file=sys.stderr)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every complete entry of a metrics file; a torn line is dropped with a note.

    Torn: the last line, when its writer died before its newline; or, inside the file, a
    line's first part, when an entry was appended after a torn one (as tinygpt did before
    it removed torn lines first): the whole entry at the line's end is kept.
    """
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    if lines[-1]:  # a complete file ends with "\n": its last piece is ""
        _note_torn(path, "its last line")
    entries = []
    for number, line in enumerate(lines[:-1], 1):
        entry = _entry(line)
        if entry is None:
            entry = next(filter(None, (_entry(line[i:]) for i, c in enumerate(line) if c == "{" and i)), None)
            if entry is None:
                raise UserError(
                    f"{path} line {number} is not one of its entries (a JSON object with a step): the file "
                    "was edited or damaged; put back a good copy, or move it away to go on without it"
                )
            _note_torn(path, f"the start of line {number}")
        entries.append(entry)
    return entries


def _entry(line: str) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) and "step" in entry else None


def rewind_metrics(path: str | Path, step: int) -> None:
    """Keep only the entries up to and including step (and no torn line), atomically."""
    path = Path(path)
    if not path.is_file():
        return
    kept = [e for e in read_metrics(path) if e["step"] <= step]
    try:
        write_atomic(path, "".join(json.dumps(e) + "\n" for e in kept))
    except OSError as e:
        raise UserError(f"cannot rewrite {path}: {e.strerror}; free some space or fix permissions") from None
