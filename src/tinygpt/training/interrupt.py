"""Stopping training cleanly on Ctrl-C (SIGINT), SIGTERM, or SIGHUP (the terminal was closed).

While the training loop runs, the first signal only asks it to stop: the loop
finishes the step it is in (a step of several micro-batches, train.grad_accum_steps,
is dropped at its next micro-batch instead, and the step before it saved), writes
last.pt and raises `Interrupted`, and the
command line exits with 128 + the signal's number, the shell's convention:
130 for SIGINT, 143 for SIGTERM. (Under torchrun, which passes a signal on to
every rank, the ranks stop together at the next log_interval step.) A second
signal stops at once, and so does a signal before the loop has started (there
is nothing to save yet); every checkpoint already written stays intact because
saves are atomic. A second signal that comes while a checkpoint is being saved
(`saving`) stops as soon as that save is whole, so that a run stopped twice
still has the last.pt the first signal asked for, to --resume from.

Outside the training loop (any command, while `stopping_like_ctrl_c` is active),
SIGTERM and SIGHUP do what Ctrl-C does: they raise `Interrupted` where the
program is, so that a file or directory half-written is removed on the way up
(tinygpt.files.atomic, the export), where by default they would end the process on the
spot and leave it.
"""

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))


class Interrupted(KeyboardInterrupt):
    """Training stopped on a signal; `exit_code` is 128 + the signal's number.

    A KeyboardInterrupt, so that no `except Exception` on the way up can swallow it.
    """

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class StopRequest:
    """Catches SIGINT and SIGTERM while active (a context manager); `requested` says one came.

    The previous handlers are restored on exit. A signal the process was started
    to ignore (as a shell does for `cmd &` in a script) stays ignored, as Python
    itself leaves it. Outside the main thread, where Python cannot install
    handlers, it changes nothing.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.armed = False
        self.saving_now: str | None = None  # the file being saved, while `saving`
        self.second: int | None = None  # a second signal that came during that save
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            wanted = [s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
            self._previous = {s: signal.signal(s, self._handle) for s in wanted}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def arm(self) -> None:
        """From now on the first signal asks to stop after the current step, not at once."""
        self.armed = True

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @contextmanager
    def saving(self, name: str) -> Iterator[None]:
        """While inside, a second signal waits for the save of `name` to be whole, then stops."""
        self.saving_now = name
        try:
            yield
        finally:
            self.saving_now = None
        if self.second is not None:
            what = signal.Signals(self.second).name
            raise Interrupted(self.second, f"stopped by a second {what} once {name} was saved")

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not self.armed:
            raise Interrupted(signum, f"stopped by {name} before training began")
        if self.requested and self.saving_now is not None:
            self.second = signum
            _tell(f"\n{name}: stopping once {self.saving_now} is saved\n")
            return
        if self.requested:
            raise Interrupted(
                signum, f"stopped at once by a second {name}; checkpoints saved before are intact"
            )
        self.signum = signum
        if os.environ.get("RANK", "0") != "0":  # under torchrun every rank is told: rank 0 says it
            return
        again = "Ctrl-C" if signum == signal.SIGINT else name
        _tell(
            f"\n{name}: saving the last whole step to last.pt, then stopping ({again} again stops at once)\n"
        )


def _tell(notice: str) -> None:
    """Write a notice to stderr from a signal handler: with os.write to fd 2, not print, because the
    handler may run while the progress bar is half-way through a buffered write to sys.stderr, and
    re-entering that buffer would raise."""
    try:
        os.write(2, notice.encode())
    except OSError:  # no stderr to tell
        pass


@contextmanager
def stopping_like_ctrl_c() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise Interrupted, as SIGINT raises KeyboardInterrupt.

    A signal the process was started to ignore stays ignored; outside the main thread nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum, f"stopped by {signal.Signals(signum).name}")

    others = [s for s in SIGNALS if s != signal.SIGINT and signal.getsignal(s) is not signal.SIG_IGN]
    previous = {s: signal.signal(s, stop) for s in others}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
