"""How characters and numbers show on a terminal: a visible glyph for each character, its width,
a quoted form for prose, and the walkthroughs' numbers and vectors.

A character-level model's vocabulary can hold anything: newlines, tabs, control
characters, combining accents, emoji. Printed raw, these break a grid's columns
or even steer the terminal, so every character the views print goes through here.
"""

import unicodedata

import torch

NAMED_GLYPHS = {"\n": "↵", "\t": "⇥", " ": "·", "\r": "␍", "\x7f": "␡"}
REPLACEMENT = "�"


def glyph(char: str) -> str:
    """One visible symbol for a character, safe to print: '\\n' → '↵', ' ' → '·', control → '␀'…'␟'."""
    if char in NAMED_GLYPHS:
        return NAMED_GLYPHS[char]
    if ord(char) < 0x20:
        return chr(0x2400 + ord(char))  # Unicode's control pictures: ␀ … ␟
    if _is_mark(char):
        return "◌" + char  # a combining mark shown on a dotted circle instead of on its neighbour
    if not char.isprintable():
        return REPLACEMENT
    return char


def width(text: str) -> int:
    """Terminal columns text takes: 2 for wide characters (CJK, most emoji), 0 for combining marks."""
    total = 0
    for char in text:
        if _is_mark(char):
            continue
        total += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return total


def pad(text: str, columns: int) -> str:
    """text followed by spaces up to `columns` terminal columns."""
    return text + " " * max(0, columns - width(text))


def escaped(char: str) -> str:
    """The character itself where it shows on its own, else Python's escape: ä stays ä, a newline is \\n.

    A backslash is doubled, so that a run of escaped characters reads back unambiguously.
    """
    if char != "\\" and char.isprintable() and not _is_mark(char):
        return char
    return char.encode("unicode_escape").decode("ascii")


def quoted(char: str) -> str:
    """A character in quotes with Python's escapes for the invisible ones: 'a', '\\n', ' ', '\\x1b'."""
    return '"\'"' if char == "'" else f"'{escaped(char)}'"


def _is_mark(char: str) -> bool:
    """A combining mark: printed alone, it lands on the character before it."""
    return bool(unicodedata.combining(char)) or unicodedata.category(char) in ("Mn", "Me")


def num(x: float) -> str:
    """A number as the walkthrough prints it: 4 decimals."""
    return f"{x:.4f}"


def vec(values: torch.Tensor, dims: int | None = None) -> str:
    """[a, b, …] with the first `dims` entries (all when None) and how many there are in all."""
    shown = values.tolist() if dims is None else values[:dims].tolist()
    body = ", ".join(num(x) for x in shown)
    rest = values.numel() - len(shown)
    return f"[{body}, … {rest} more]" if rest else f"[{body}]"
