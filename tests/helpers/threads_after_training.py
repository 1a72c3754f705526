"""`tinygpt train`, then the names of this process's threads that gloo started, if any are left.

Run under torchrun with the train command's options. When the process group is
taken down completely, gloo's threads are joined while Python still runs; one
left running into interpreter shutdown can abort the process there.
"""

import os
import sys
from pathlib import Path

from tinygpt.app import cli

status = cli.main(["train", *sys.argv[1:]])
tasks = Path("/proc/self/task")
names = [(tasks / t / "comm").read_text().strip() for t in os.listdir(tasks)]
print(f"rank {os.environ['RANK']}: gloo threads left: {sorted(n for n in names if 'gloo' in n)}")
sys.exit(status)
