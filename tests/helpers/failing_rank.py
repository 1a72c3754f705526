"""`tinygpt train` in which rank 1 fails after a few batches: for tests of how a distributed job ends.

Run under torchrun with the train command's options and train.eval_iters=2: rank 1
raises a UserError on its 7th batch, in the third training step (the evaluation at
step 0 draws the first four); the other ranks run as usual.
"""

import os
import sys

from tinygpt.app import cli
from tinygpt.data import corpus as data
from tinygpt.errors import UserError

if os.environ.get("RANK") == "1":
    draw = data.Batches.sample
    calls = 0

    def failing_sample(self, generator):
        global calls
        calls += 1
        if calls == 7:
            raise UserError("injected failure on this rank")
        return draw(self, generator)

    data.Batches.sample = failing_sample

sys.exit(cli.main(["train", *sys.argv[1:]]))
