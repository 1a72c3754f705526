"""One training run per run directory, with a lock that a dead run cannot leave stuck.

The lock is the file `<run>/lock`, which names its holder (pid, host, start
time), held with flock(2). The kernel releases a flock when its process ends,
however it ends (even by SIGKILL or a crash), so a lock file left behind by a
dead run is stale by construction: the next run, usually `--resume`, takes it
over. A live holder is refused, named in the message. The file is removed when
the run ends.

Why not a file created with O_EXCL and a pid check: that needs a guess about
staleness (is the pid alive, on which host, was it reused?) and a race-free
way to replace a stale file; flock answers both in the kernel.
"""

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from tinygpt.errors import UserError


class RunLock:
    """An exclusive lock on a run directory: `acquire` or a UserError naming the holder; `release`."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise UserError if a live process holds it. OSError if it cannot be made."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(os.pread(fd, 4096, 0))
                os.close(fd)
                raise UserError(
                    f"{self.path.parent} is in use by another training run ({holder}); wait for it "
                    "to finish or stop it, or train elsewhere with --set out_dir=checkpoints/<new name>"
                ) from None
            if _is_current(fd, self.path):
                break
            os.close(fd)  # the holder removed the file between our open and flock: open the new one
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file and let go; does nothing if not held."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # while still locked, so no one takes a file about to vanish
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _is_current(fd: int, path: Path) -> bool:
    """Whether the open file is still the one at path (not unlinked by its last holder)."""
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _describe(raw: bytes) -> str:
    try:
        h = json.loads(raw)
        return f"pid {h['pid']} on {h['host']}, started {h['started']}"
    except (ValueError, KeyError, TypeError):  # the holder has not written its details yet
        return "a process that is just starting"
