"""Training killed at every point of its checkpoint and metrics writes: nothing lost, resume completes.

tests/helpers/kill_points.py does the killing, in processes forked from one that imported torch once.
"""

import json
import sys
from pathlib import Path

import pytest
import yaml
from conftest import own_process_group, tiny_raw

pytestmark = pytest.mark.slow  # forks a training process per point

ROOT = Path(__file__).resolve().parents[2]


def test_a_kill_at_any_point_of_a_save_loses_nothing_and_resume_ends_as_unbroken(corpus_file, tmp_path):
    """At each point: last.pt and best.pt load, the best weights the record names are in one of them,
    metrics.jsonl reads, and the resumed run ends with the files of a run never killed."""
    raw = tiny_raw(corpus_file, tmp_path / "unused", max_iters=20, eval_interval=10, eval_iters=2)
    raw["train"]["batch_size"] = 4
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    command = [
        sys.executable,
        str(ROOT / "tests" / "helpers" / "kill_points.py"),
        str(config),
        str(tmp_path / "work"),
    ]
    with own_process_group(command, ROOT) as job:  # the runner and any child it forked
        out, err = job.communicate(timeout=2400)  # a guard against a hang, generous for a busy machine
    assert job.returncode == 0, err
    first, *points = [json.loads(line) for line in out.splitlines()]
    events = first["events"]
    assert len(points) == len(events) >= 30
    for kind in ("last.pt: half written", "best.pt: rename", "metrics.jsonl: half appended", "lock: fsync"):
        assert kind in events
    between = [i for i, e in enumerate(events[:-1]) if e == "last.pt: after writing"]
    assert any(events[i + 1] == "best.pt: before writing" for i in between)  # a kill between the two files
    assert [p for p in points if p["problems"]] == []
