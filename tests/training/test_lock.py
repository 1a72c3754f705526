"""One run per run directory: a live holder is refused by name, a dead one's lock is taken over."""

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import train

from tinygpt.errors import UserError
from tinygpt.training import lock
from tinygpt.training.lock import RunLock

HOLD = """
import sys, time
from tinygpt.training.lock import RunLock
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_holder_is_refused_and_the_lock_goes_with_its_holder(tmp_path):
    with RunLock(tmp_path):
        holder = json.loads((tmp_path / "lock").read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        message = (
            rf"{tmp_path} is in use by another training run \(pid {os.getpid()} on {holder['host']}, started"
        )
        with pytest.raises(UserError, match=message):
            RunLock(tmp_path).acquire()
    assert not (tmp_path / "lock").exists()
    with RunLock(tmp_path):  # free again
        pass


@pytest.mark.slow
def test_the_lock_of_a_killed_process_is_stale_and_taken_over(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(UserError, match=f"pid {holder.pid} on"):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()  # SIGKILL: no clean-up of its own runs
        holder.wait()
    assert json.loads((tmp_path / "lock").read_text())["pid"] == holder.pid  # left behind
    with RunLock(tmp_path):
        assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()


@pytest.mark.usefixtures("one_thread")
def test_training_refuses_a_directory_in_use_and_unlocks_on_every_exit(tiny_config):
    run = Path(tiny_config.out_dir)
    run.mkdir()
    with RunLock(run):
        with pytest.raises(UserError, match="is in use by another training run"):
            train(tiny_config, progress=False)
    assert list(run.iterdir()) == []  # the refused run changed nothing
    train(tiny_config, progress=False)
    assert not (run / "lock").exists()  # a finished run
    with pytest.raises(UserError, match="already holds a run"):
        train(tiny_config, progress=False)
    assert not (run / "lock").exists()  # a refused one


@pytest.mark.usefixtures("one_thread")
def test_a_second_run_into_a_directory_in_use_is_told_so_not_to_resume(tiny_config):
    """A second `train` into the out_dir of a run still training (its last.pt already written) was told
    "already holds a run; add --resume to continue it", and with --resume only then that it is in use."""
    run = Path(tiny_config.out_dir)
    train(tiny_config, progress=False)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    with RunLock(run):
        for resume in (False, True):
            tiny_config.train.max_iters += resume  # a resume with steps left to train
            with pytest.raises(UserError) as raised:
                train(tiny_config, resume=resume, progress=False)
            assert "is in use by another training run" in str(raised.value)
            assert "--resume" not in str(raised.value)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing changed, no lock left


@pytest.mark.slow
def test_deleting_the_lock_file_of_a_live_run_does_not_let_a_second_one_in(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        (tmp_path / "lock").unlink()  # "a stale lock", cleared by hand
        with pytest.raises(UserError, match="in use by another training run .*lock file was deleted"):
            RunLock(tmp_path).acquire()
        assert not (tmp_path / "lock").exists()  # the refused one wrote nothing
        (tmp_path / "lock").write_text("{}")  # or replaced by another file
        with pytest.raises(UserError, match="in use by another training run"):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    with RunLock(tmp_path):  # the holder gone, the directory is free
        assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
    assert list(tmp_path.iterdir()) == []


def test_a_file_system_without_flock_is_a_user_error_and_changes_nothing(tiny_config, monkeypatch):
    """NFS mounted without locking gives ENOLCK: one clear error, and no file of the run is written."""

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(lock.fcntl, "flock", no_locks)
    run = Path(tiny_config.out_dir)
    with pytest.raises(UserError) as caught:
        train(tiny_config, progress=False)
    assert str(caught.value) == (
        f"cannot lock {run} (No locks available): its file system does not take flock(2) locks, as some "
        "NFS mounts do not; set out_dir to a directory on a local disk"
    )
    assert list(run.iterdir()) == []  # created for the lock, nothing written into it
