import pytest

from tinygpt.errors import UserError
from tinygpt.metrics import append_metrics, read_metrics, rewind_metrics


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
    with pytest.raises(UserError, match="line 2 is not a metrics entry"):
        read_metrics(path)


def test_a_failed_append_is_a_user_error(tmp_path):
    (tmp_path / "file").touch()
    with pytest.raises(UserError, match="cannot append to .*: Not a directory"):
        append_metrics(tmp_path / "file" / "metrics.jsonl", {"step": 0})
