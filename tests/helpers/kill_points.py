"""Kill training at every point of its checkpoint and metrics writes, one point per run, and resume each.

For tests/end_to_end/test_fault_injection.py:  python tests/helpers/kill_points.py CONFIG.yaml WORKDIR

A reference run first counts the points ("events") in the order training meets them:
for each file written through write_atomic (config.yaml, lock, last.pt, best.pt),
before it, half-way through its bytes, at each fsync (the file's, then its
directory's), at the rename, and after it (between last.pt and best.pt); for each
metrics append, before it, half-way through its line (a torn line) and after it.
Then, for each point k, a fresh run in a directory of its own is killed there
with os._exit (no clean-up, no flush: what kill -9 leaves on disk), the files are
checked as they were left, and the run is resumed (started afresh where no last.pt
was left) to its end and compared with the reference. One JSON line per point is
printed: the point, and what was wrong (empty when nothing was).

Every run is a child forked from this process, which imports torch but never
computes with it (OpenMP does not survive a fork of a process that has used it).
"""

import json
import os
import sys
from pathlib import Path

import torch

from tinygpt.config.run_config import load_config
from tinygpt.errors import UserError
from tinygpt.files import atomic as files
from tinygpt.files import metrics
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.metrics import read_metrics

KILLED = 137  # what a shell reports for kill -9


def install_kill(at: int | None, log: list[str]) -> None:
    """Count each event into log; at the `at`-th (from 1), end the process on the spot."""
    current = {"file": None}
    real_fsync, real_replace, real_write_atomic, real_append = (
        os.fsync,
        os.replace,
        files.write_atomic,
        metrics.append_metrics,
    )

    def event(what: str, before_dying=None) -> None:
        log.append(f"{current['file']}: {what}")
        if len(log) == at:
            if before_dying:
                before_dying()
            os._exit(KILLED)

    class HalfWrites:
        """write_atomic's file, whose write can stop half-way at the kill."""

        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            event("half written", lambda: (self.f.write(data[: len(data) // 2]), self.f.flush()))
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

    def write_atomic(path, data):
        current["file"] = Path(path).name
        event("before writing")
        real_write_atomic(path, data)
        current["file"] = Path(path).name
        event("after writing")

    def append_metrics(path, entry):
        current["file"] = Path(path).name
        line = (json.dumps(entry) + "\n").encode()
        event("before appending")

        def torn():
            with open(path, "ab") as f:
                f.write(line[: len(line) // 2])

        event("half appended", torn)
        real_append(path, entry)
        event("after appending")

    def fsync(fd):
        event("fsync")
        real_fsync(fd)

    def replace(src, dst):
        event("rename")
        real_replace(src, dst)

    os.fsync, os.replace = fsync, replace
    files.open = lambda path, mode: HalfWrites(open(path, mode))
    for module in [m for name, m in sys.modules.items() if name.startswith("tinygpt")]:
        if getattr(module, "write_atomic", None) is real_write_atomic:
            module.write_atomic = write_atomic
        if getattr(module, "append_metrics", None) is real_append:
            module.append_metrics = append_metrics


def in_child(work) -> tuple[int, object]:
    """Run work() in a forked child; (its exit status, what it returned, through a pipe)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # training's own lines: this runner's stdout is JSON
        torch.set_num_threads(1)
        result = work()
        with os.fdopen(write, "w") as out:
            json.dump(result, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as got:
        text = got.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), json.loads(text) if text else None


def train_to_end(config_path: str, out_dir: Path, at: int | None = None) -> list[str]:
    """Train the config into out_dir (resuming when last.pt is there), killed at event `at`."""
    from tinygpt.explain.timeline import listeners_for
    from tinygpt.training.loop import train

    config = load_config(config_path, [f"out_dir={out_dir}"])
    log: list[str] = []
    install_kill(at, log)
    train(config, resume=(out_dir / "last.pt").is_file(), progress=False, listeners=listeners_for(config))
    return log


def summary(out_dir: Path) -> dict:
    """What a finished run left: each file's step and weights' fingerprint, and the metrics' steps."""
    last, best = read_checkpoint(out_dir / "last.pt"), read_checkpoint(out_dir / "best.pt")
    return {
        "last_step": last.record["step"],
        "best_step": last.record["best_step"],
        "best_pt_step": best.record["step"],
        "last_weights": fingerprint(last.weights),
        "best_weights": fingerprint(best.weights),
        "metrics_steps": [e["step"] for e in read_metrics(out_dir / "metrics.jsonl")],
    }


def fingerprint(state: dict) -> str:
    return repr([(k, v.double().sum().item(), v.double().abs().sum().item()) for k, v in state.items()])


def as_left(out_dir: Path) -> list[str]:
    """What is wrong with the files as the kill left them: each must load, and the best weights
    the record names must be in best.pt or, for resume to restore them, in last.pt."""
    problems, loaded = [], {}
    for name in ("last.pt", "best.pt"):
        if (out_dir / name).exists():
            try:
                loaded[name] = read_checkpoint(out_dir / name)
            except UserError as e:
                problems.append(f"{name} does not load: {e}")
    if "last.pt" in loaded:
        record = loaded["last.pt"].record
        best_held = "best.pt" in loaded and loaded["best.pt"].record["step"] == record["best_step"]
        if not best_held and record["step"] != record["best_step"]:
            problems.append(f"the best weights (step {record['best_step']}) are in neither file")
    try:
        read_metrics(out_dir / "metrics.jsonl") if (out_dir / "metrics.jsonl").exists() else None
    except UserError as e:
        problems.append(f"metrics.jsonl does not read: {e}")
    return problems


def cache_ids(config_path: str) -> None:
    """Write the corpus's id cache, so that no run after this one writes it (or counts its events)."""
    from tinygpt.data.corpus import load_corpus

    config = load_config(config_path)
    load_corpus(config.data, config.model.block_size)


def main(config_path: str, workdir: Path) -> None:
    assert in_child(lambda: cache_ids(config_path))[0] == 0, "the corpus did not load"
    reference = workdir / "reference"
    code, events = in_child(lambda: train_to_end(config_path, reference))
    assert code == 0, f"the reference run failed ({code})"
    code, expected = in_child(lambda: summary(reference))
    print(json.dumps({"events": events}), flush=True)
    for at in range(1, len(events) + 1):
        out_dir = workdir / f"kill{at}"
        code, _ = in_child(lambda at=at, out_dir=out_dir: train_to_end(config_path, out_dir, at))
        problems = [] if code == KILLED else [f"the run was not killed (exit {code})"]
        problems += in_child(lambda out_dir=out_dir: as_left(out_dir))[1]
        code, _ = in_child(lambda out_dir=out_dir: train_to_end(config_path, out_dir))
        if code != 0:
            problems.append(f"resuming failed (exit {code})")
        else:
            got = in_child(lambda out_dir=out_dir: summary(out_dir))[1]
            problems += [
                f"{key}: {got[key]} after the kill, {expected[key]} without"
                for key in expected
                if got[key] != expected[key]
            ]
        print(json.dumps({"at": at, "event": events[at - 1], "problems": problems}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
