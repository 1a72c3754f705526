"""One training run per run directory, with a lock that a dead run cannot leave stuck.

The lock is flock(2) on the run directory itself (opened read-only), not on a file in
it: a lock file can be deleted, by hand or by a clean-up script, while its run still
writes, and the next run would then lock a new file of the same name and get in. A
directory cannot be deleted while it holds the run's files. The kernel releases a flock
when its process ends, however it ends (even by SIGKILL or a crash), so a dead run
never leaves its directory stuck: the next run, usually `--resume`, takes it over.

The file `<run>/lock` only names the holder (pid, host, start time) for the message
that refuses a second run; deleting it changes nothing. It is removed when the run ends.

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
from tinygpt.files.atomic import write_atomic


class RunLock:
    """An exclusive lock on a run directory: `acquire` or a UserError naming the holder; `release`."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.path = self.directory / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise UserError if a live process holds it or the file system has no flock.

        OSError if the directory cannot be opened.
        """
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(
                f"{self.directory} is in use by another training run ({_holder(self.path)}); wait for it "
                "to finish or stop it, or train elsewhere with --set out_dir=checkpoints/<new name>"
            ) from None
        except OSError as e:  # ENOLCK, EOPNOTSUPP: a file system without flock, as some NFS mounts
            os.close(fd)
            raise UserError(
                f"cannot lock {self.directory} ({e.strerror}): its file system does not take flock(2) "
                "locks, as some NFS mounts do not; set out_dir to a directory on a local disk"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        try:
            write_atomic(self.path, json.dumps(holder))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Remove the holder's file and let go; does nothing if not held."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # while still locked, so no one's fresh file is removed
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(path: Path) -> str:
    """The holder as its lock file names it."""
    try:
        h = json.loads(path.read_bytes())
        return f"pid {h['pid']} on {h['host']}, started {h['started']}"
    except FileNotFoundError:
        return "a process whose lock file was deleted; it still holds the directory"
    except (OSError, ValueError, KeyError, TypeError):  # the holder has not written its details yet
        return "a process that is just starting"
