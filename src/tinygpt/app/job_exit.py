"""How a command's process ends when it fails inside a torchrun job.

Every rank meets a mistake in the config alike, so rank 0 says it once for the job and
the others wait for torchrun to end them; a rank that failed leaves at once, skipping
Python's clean-up (see leave_job_if_failed why). Outside torchrun these only return.
Used by the command line (tinygpt.app.cli) and by `train` (tinygpt.app.commands).
"""

import os
import sys
import time

from tinygpt.errors import RankError, UserError


def said_by_this_process(error: UserError) -> bool:
    """Under torchrun every rank meets a mistake in the config or the command alike: rank 0 says it,
    once for the job; a mistake one rank met on its own (a RankError) is said by that rank."""
    return isinstance(error, RankError) or os.environ.get("RANK", "0") == "0"


SAYING_WAIT_S = 30  # at most, for torchrun to end a rank that left a mistake to rank 0


def wait_for_rank_0_to_say_it() -> None:
    """A rank that leaves the mistake to rank 0 stays until torchrun ends it, which it does once rank 0
    has said it and left. Leaving first would make torchrun stop rank 0, on a busy machine before it
    had got as far as the mistake, and the job would end saying nothing."""
    time.sleep(SAYING_WAIT_S)


def in_torchrun_job() -> bool:
    return os.environ.get("WORLD_SIZE", "1") != "1"


def leave_job_if_failed(code: int) -> int:
    """A rank of a torchrun job that failed (or was stopped by a signal, its last.pt saved) ends its
    process here, at once, skipping Python's clean-up.

    Called while the error is still being handled, so that the failed step's frames (and
    DDP's reducer in them) are still alive: freeing the reducer joins gloo's threads while
    holding the GIL, and a gloo thread finishing the failed step's all-reduce waits for the
    GIL, a deadlock that kept the rank alive and the job hanging. torchrun sees the exit
    and stops the other ranks. Outside torchrun it only returns the code.
    """
    if not in_torchrun_job():
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
