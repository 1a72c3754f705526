"""The one way tinygpt writes a file: whole or not at all, and never through a symbolic link.

`write_atomic` writes the bytes to a temporary file beside the target, flushes
and fsyncs it, renames it over the target (atomic on POSIX) and fsyncs the
directory, so that a process killed at any moment leaves either the old file or
the whole new one. The rename replaces whatever is at the path, a symbolic link
included, instead of writing into the file the link points to.
"""

import os
from pathlib import Path


def partial_path(path: Path) -> Path:
    """Where write_atomic stages path's new bytes: a hidden name that says whose it is."""
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


def write_atomic(path: str | Path, data: bytes | memoryview | str) -> None:
    """Replace path with data (str is written as UTF-8), mode 0644 under the usual umask.

    Raises OSError (a full disk, a directory that cannot be written), leaving path as it was.
    """
    path = Path(path)
    partial = partial_path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        partial.unlink(missing_ok=True)  # a stale one (or a link planted there) goes, never followed
        with open(partial, "xb") as f:  # x: create it new, so no existing file or link is written through
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)  # make the rename itself durable


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
