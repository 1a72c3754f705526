"""Thin wrapper: same as `tinygpt inspect`. Run `python scripts/inspect_checkpoint.py --help` for options."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works from a plain checkout too

from tinygpt.app.cli import main

sys.exit(main(["inspect", *sys.argv[1:]]))
