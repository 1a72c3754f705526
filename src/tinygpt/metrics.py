"""metrics.jsonl: one JSON object per line, appended as each evaluation finishes.

Each entry goes to the end of the file in one write of one whole line, so a
process that dies at any moment leaves every earlier line intact and at worst
a torn last line, which `read_metrics` skips. On --resume the file is cut back
to the step of last.pt, so entries a dead run logged after its last checkpoint
are not logged twice.
"""

import json
import os
from pathlib import Path
from typing import Any

from tinygpt.errors import UserError
from tinygpt.files import write_atomic


def append_metrics(path: str | Path, entry: dict[str, Any]) -> None:
    """Append one entry as one line."""
    line = (json.dumps(entry) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write of the whole line: never interleaved, never half-done by us
        finally:
            os.close(fd)
    except OSError as e:
        raise UserError(
            f"cannot append to {path}: {e.strerror}; free some space or fix permissions"
        ) from None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every complete entry of a metrics file; a torn last line (the writer died mid-write) is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")  # a complete file ends with "\n": its last piece is ""
    entries = []
    for number, line in enumerate(lines[:-1], 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            entry = None
        if not isinstance(entry, dict) or "step" not in entry:
            raise UserError(f"{path} line {number} is not a metrics entry; the file was edited or damaged")
        entries.append(entry)
    return entries  # lines[-1] is "" or a line whose writer died before its newline


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
