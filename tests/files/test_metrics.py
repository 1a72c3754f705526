import subprocess
import sys

import pytest

from tinygpt.errors import UserError
from tinygpt.files.metrics import append_metrics, read_metrics, rewind_metrics


def test_entries_append_line_by_line_and_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for step in (0, 20, 40):
        append_metrics(path, {"step": step, "val_loss": 3.0 - step / 100})
    assert path.read_text().count("\n") == 3
    with open(path, "a") as f:
        f.write('{"step": 60, "val_lo')  # the writer died here
    assert [m["step"] for m in read_metrics(path)] == [0, 20, 40]
    assert read_metrics(tmp_path / "none.jsonl") == []


def test_rewind_keeps_entries_up_to_a_step_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 20}\n{"step": 40}\n{"step": 6')
    rewind_metrics(path, 20)
    assert path.read_text() == '{"step": 0}\n{"step": 20}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


@pytest.mark.parametrize("line", ["not json", "[1, 2]", '{"loss": 1}'])
def test_a_damaged_line_inside_the_file_is_an_error(tmp_path, line):
    path = tmp_path / "metrics.jsonl"
    path.write_text(f'{{"step": 0}}\n{line}\n{{"step": 40}}\n')
    with pytest.raises(
        UserError, match="line 2 is not one of its entries .*; put back a good copy, or move it away"
    ):
        read_metrics(path)


def test_a_failed_append_is_a_user_error(tmp_path):
    (tmp_path / "file").touch()
    with pytest.raises(UserError, match="cannot append to .*: Not a directory"):
        append_metrics(tmp_path / "file" / "metrics.jsonl", {"step": 0})


def test_a_torn_last_line_is_noted_and_removed_before_the_next_append(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 20, "val_lo')  # a crash mid-write
    assert read_metrics(path) == [{"step": 0}]
    assert (
        capsys.readouterr().err
        == f"note: {path}: its last line was torn (its writer stopped mid-line); dropped\n"
    )
    append_metrics(path, {"step": 20})
    assert path.read_text() == '{"step": 0}\n{"step": 20}\n'
    assert "its last line was torn" in capsys.readouterr().err
    assert read_metrics(path) == [{"step": 0}, {"step": 20}]


def test_an_entry_appended_after_a_torn_one_is_kept_and_the_torn_part_dropped(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 20, "val_lo{"step": 40, "val_loss": 1.5}\n{"step": 60}\n')
    assert read_metrics(path) == [{"step": 0}, {"step": 40, "val_loss": 1.5}, {"step": 60}]
    assert "the start of line 2 was torn" in capsys.readouterr().err
    rewind_metrics(path, 40)
    assert path.read_text() == '{"step": 0}\n{"step": 40, "val_loss": 1.5}\n'


SHORT_WRITE = """
import resource, signal, sys
from tinygpt.errors import UserError
from tinygpt.files.metrics import append_metrics
path = sys.argv[1]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (len(open(path, "rb").read()) + 10, resource.RLIM_INFINITY))
try:
    append_metrics(path, {"step": 40, "val_loss": 1.25, "train_loss": 1.5})
except UserError as e:
    print(e)
"""


@pytest.mark.slow
def test_a_write_cut_short_by_a_full_disk_is_an_error_and_leaves_no_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for step in (0, 20):
        append_metrics(path, {"step": step})
    before = path.read_bytes()
    done = subprocess.run([sys.executable, "-c", SHORT_WRITE, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"cannot append to {path}: wrote 10 of 50 bytes, removed again; free some")
    assert path.read_bytes() == before
    append_metrics(path, {"step": 40})  # with room again, the next entry follows whole lines
    assert [e["step"] for e in read_metrics(path)] == [0, 20, 40]
