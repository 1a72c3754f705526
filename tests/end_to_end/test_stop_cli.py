"""SIGTERM and SIGHUP during any command stop it as Ctrl-C does: the half-written file or directory
goes, and the exit code is 128 + the signal's number. (Training's own stop is in test_interrupt.py.)

Each signal is raised from inside the write it interrupts, so it comes at the same point every run.
"""

import signal

import pytest

import tinygpt.app.export
import tinygpt.files.atomic
import tinygpt.generation.sampling
from tinygpt.app.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def signal_half_way_through_a_write(monkeypatch, signum: int) -> None:
    """The next file write_atomic writes stops half-way: signum comes after its first half."""

    class HalfThenSignal:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            signal.raise_signal(signum)  # its handler runs here
            return self.f.write(data[len(data) // 2 :])

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(
        tinygpt.files.atomic, "open", lambda path, mode: HalfThenSignal(open(path, mode)), raising=False
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_a_signal_during_the_page_write_leaves_no_partial_file(
    odd_checkpoint, tmp_path, monkeypatch, capsys, signum
):
    before = signal.signal(signum, signal.SIG_DFL)  # as in a terminal (pytest under nohup ignores SIGHUP)
    try:
        signal_half_way_through_a_write(monkeypatch, signum)
        page = tmp_path / "over.html"
        assert main(["explain", str(odd_checkpoint), "--html", str(page)]) == 128 + signum
        assert list(tmp_path.iterdir()) == []  # neither the page nor its hidden .over.html.<pid>.partial
        assert f"stopped by {signal.Signals(signum).name}" in capsys.readouterr().err
        assert signal.getsignal(signum) is signal.SIG_DFL  # put back as it was
    finally:
        signal.signal(signum, before)


def test_sigterm_during_an_export_leaves_no_partial_directory(odd_checkpoint, tmp_path, monkeypatch):
    real = tinygpt.app.export._write_safetensors

    def write_then_signal(*args):
        real(*args)
        signal.raise_signal(signal.SIGTERM)  # the files are in the hidden directory, not yet renamed

    monkeypatch.setattr(tinygpt.app.export, "_write_safetensors", write_then_signal)
    assert main(["export", str(odd_checkpoint), str(tmp_path / "out"), "--format", "safetensors"]) == 143
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_sampling_says_what_stopped_it(odd_checkpoint, monkeypatch, capsys, ctrl_c_handled):
    """Ctrl-C mid-stream: the text so far stays on stdout, and stderr says SIGINT stopped it."""
    real = tinygpt.generation.sampling.sample_next
    drawn = []

    def draw_then_ctrl_c(*args, **kwargs):
        drawn.append(1)
        if len(drawn) == 5:
            signal.raise_signal(signal.SIGINT)  # as the terminal sends it for Ctrl-C
        return real(*args, **kwargs)

    monkeypatch.setattr(tinygpt.generation.sampling, "sample_next", draw_then_ctrl_c)
    code = main(["sample", "--checkpoint", str(odd_checkpoint), "--max-new-tokens", "50", "--prompt", ""])
    out, err = capsys.readouterr()
    assert code == 130
    assert len(out) >= 4  # the characters sampled before the signal were printed
    assert err.strip().splitlines()[-1] == "stopped by SIGINT"
