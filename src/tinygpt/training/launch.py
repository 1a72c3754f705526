"""`tinygpt-torchrun`: torchrun itself, with the same options, ending quietly on Ctrl-C.

torchrun's agent turns Ctrl-C (SIGINT), SIGTERM or SIGHUP into an exception,
passes the signal on to every rank, waits for them, and then lets the exception
out: some thirty lines of traceback (`SignalException: Process … got signal: 2`)
under the ranks' own `stopped by SIGINT at step …; saved …/last.pt`. Here the
same launcher runs, and that ending is the shell's instead: exit 128 + the
signal's number, with torchrun's two log lines about passing the signal on left
out. Every other message of torchrun's stays.

Started through tinygpt, torch is imported after tinygpt's warning filter (see
tinygpt/__init__.py), so that without NumPy, which tinygpt never needs, torch's
"Failed to initialize NumPy" warning stays out of the terminal; plain torchrun
imports torch first and prints it.
"""

import logging
import signal
import sys

# torchrun's log records about a signal it got and passes on to the ranks
SIGNAL_RECORDS = {
    "torch.distributed.elastic.agent.server.api": "death signal, shutting down workers",
    "torch.distributed.elastic.multiprocessing.api": "closing signal",
}


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with argv (default: the command line's); its exit status, 128 + N on signal N."""
    try:
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.run import main as torchrun

        for name, text in SIGNAL_RECORDS.items():
            logging.getLogger(name).addFilter(lambda record, text=text: text not in record.getMessage())
        torchrun(argv)
    except SignalException as e:  # the ranks were told, have stopped and said so
        return 128 + int(e.sigval)
    except KeyboardInterrupt:  # Ctrl-C before torchrun had started the ranks
        return 128 + signal.SIGINT
    return 0


if __name__ == "__main__":
    sys.exit(main())
