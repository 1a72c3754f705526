"""The built-in induction corpus: random strings, each written twice, made by the program.

Every line is a string of random letters followed by a space and the same string again:

    kdqbhajt kdqbhajt
    rmcsoepfgiltna rmcsoepfgiltna

The first copy is noise (nothing predicts it but letter frequencies); the second is
predictable only by finding where the current letter stood in the first copy and
reading the letter after it. That is an induction head's job (Olsson et al. 2022,
"In-context Learning and Induction Heads"), and because the strings' lengths vary,
the copy sits at a different distance on every line, so no head can do it by
position alone. The text is seeded: every machine builds the same file, with no download.
"""

import random
import sys
from pathlib import Path

from tinygpt.files.atomic import write_atomic

LETTERS = "abcdefghijklmnopqrst"  # 20 letters: ln 20 ≈ 3.0 nats per character of a first copy
SHORTEST, LONGEST = 6, 30  # a string's length, uniform: copies sit 7 … 31 characters back
LINES = 40_000
SEED = 0


def repeats_text(lines: int = LINES, seed: int = SEED) -> str:
    """`lines` lines, each a random string of SHORTEST … LONGEST letters, a space, and the string again."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        s = "".join(rng.choices(LETTERS, k=rng.randint(SHORTEST, LONGEST)))
        out.append(f"{s} {s}\n")
    return "".join(out)


def build_corpus(path: Path) -> Path:
    """Write the induction corpus to path unless it is there already; returns path."""
    if path.is_file():
        return path
    text = repeats_text()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
    print(f"Wrote {len(text):,} characters of doubled random strings to {path}", file=sys.stderr)
    return path
