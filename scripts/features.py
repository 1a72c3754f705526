"""Thin wrapper: same as `tinygpt features`. Run `python scripts/features.py --help` for options."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works from a plain checkout too

from tinygpt.app.cli import main

sys.exit(main(["features", *sys.argv[1:]]))
