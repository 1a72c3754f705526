"""Any unit in words: which simple property of the text says where it fires, found without a language model.

A unit is anything with one number per character: an MLP neuron, a dictionary feature.
Given the text and the unit's activation at each character (computed having seen
text[:i+1]), each candidate description is a mask over the characters, built from the
text alone, and is scored against where the unit fires (activation above a threshold):

    precision  P(fires | the description holds)
    recall     P(the description holds | fires)

Descriptions are ranked by F1, their harmonic mean. It is high only when both are: a
description that holds everywhere (recall 1, precision the base rate) and one that holds
at a single firing character (precision 1, recall near 0) both rank low, with no floor to
tune; the two numbers are kept, so a reader sees which way a description falls short.

The candidates:

    what   the character is X (each one present; ↵ a newline, ␣ a space); or it is a letter,
           a capital, a lowercase letter, a vowel, a consonant (English letters), a digit,
           whitespace, a punctuation mark
    where  after X; after two characters XY; after a character of a class; the first,
           second … fifth letter of a word (a word is letters after a non-letter); the
           first … eighth character of a line; on a speaker's line
    both   each of the WIDE best "what"s and "where"s (by recall, the ones worth narrowing)
           paired: "fires on 'e' after 'th'", "fires on a capital letter after '↵'"

A speaker's line is a whole line that is a capitalised name and a colon ("First Citizen:").
It is judged from the whole line, the characters after the unit's too: the description
says where the unit fires, not what the model could know there, and its precision shows
how well the unit anticipates the colon.
"""

import unicodedata
from dataclasses import dataclass

import torch

from tinygpt.explain.glyphs import glyph

WIDE = 8  # "what"s and "where"s paired into "both"
WORD_PLACES = 5  # letters of a word described by their place
COLUMNS = 8  # characters of a line described by their column
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")
CLASSES = {  # a class of characters: the words for it, and who belongs
    "letter": ("a letter", str.isalpha),
    "capital": ("a capital letter", str.isupper),
    "lowercase": ("a lowercase letter", str.islower),
    "vowel": ("a vowel", lambda c: c in "aeiouAEIOU"),
    "consonant": ("a consonant", lambda c: c.isascii() and c.isalpha() and c not in "aeiouAEIOU"),
    "digit": ("a digit", str.isdigit),
    "whitespace": ("whitespace", str.isspace),
    "punctuation": ("a punctuation mark", lambda c: unicodedata.category(c).startswith("P")),
}


@dataclass
class Explanation:
    """One description of where a unit fires, and how well it fits."""

    words: str  # "fires on 'e' after 'th'"
    precision: float  # P(fires | holds)
    recall: float  # P(holds | fires)
    holds: int  # characters where the description holds
    hits: int  # … and the unit fires

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total > 0 else 0.0


@dataclass
class Context:
    """One of a unit's strongest activations, with the text around it."""

    position: int  # index of the character in the whole text
    value: float  # the unit's activation there
    text: str  # the window of text around it
    index: int  # where the character is within `text`


@dataclass
class Family:
    """Candidates that share a form: a label per character, and the words for each label."""

    labels: torch.Tensor  # (N,) long: which candidate holds at each character, -1 for none
    names: list[tuple[str, str]]  # per label: (words alone, words after a "what"); a "what"'s are equal
    what: bool  # a property of the character itself, rather than of where it stands


def shown(chars: str) -> str:
    """Characters as a description quotes them: 'th', '↵', '␣' (a middle dot could be the text's own)."""
    return "'" + "".join("␣" if c == " " else glyph(c) for c in chars) + "'"


def character_codes(text: str) -> torch.Tensor:
    """The code point of each character of text: (N,) long, without a Python loop per character."""
    return torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32).long()


def previous(labels: torch.Tensor, back: int = 1) -> torch.Tensor:
    """labels (N,) moved `back` places later: the label of the character `back` before, -1 at the start."""
    return torch.cat([labels.new_full((min(back, labels.numel()),), -1), labels[:-back]])


def running_start(starts: torch.Tensor) -> torch.Tensor:
    """For each position (N,), the index of the latest position ≤ it where `starts` is true (0 if none)."""
    index = torch.arange(starts.numel())
    return torch.where(starts, index, torch.zeros_like(index)).cummax(dim=0).values


def families(text: str) -> list[Family]:
    """Every candidate description of the text's characters, as families of labels."""
    codes = character_codes(text)  # (N,)
    unique, ids = torch.unique(codes, return_inverse=True)  # (V,), (N,)
    chars = [chr(c) for c in unique.tolist()]
    found = [Family(ids, [(shown(c), shown(c)) for c in chars], what=True)]
    member = {}
    for name, (words, belongs) in CLASSES.items():
        member[name] = torch.tensor([belongs(c) for c in chars], dtype=torch.bool)[ids]  # (N,)
        found.append(Family(torch.where(member[name], 0, -1), [(words, words)], what=True))
    found.append(
        Family(
            previous(ids), [(f"any character after {shown(c)}", f"after {shown(c)}") for c in chars], False
        )
    )
    found.append(pairs_before(ids, chars))
    for name, (words, _) in CLASSES.items():
        after = previous(member[name].long()) == 1
        found.append(
            Family(torch.where(after, 0, -1), [(f"any character after {words}", f"after {words}")], False)
        )
    found += [place_in_word(member["letter"]), column(codes), speaker_line(codes, member)]
    return found


def pairs_before(ids: torch.Tensor, chars: list[str]) -> Family:
    """'after XY': the two characters before each position (ids (N,) index chars), one label per pair seen."""
    before = previous(ids, 2) * len(chars) + previous(ids)  # (N,): a number per pair
    seen = previous(ids, 2) >= 0
    pairs, labels = torch.unique(before[seen], return_inverse=True)
    spelled = [shown(chars[p // len(chars)] + chars[p % len(chars)]) for p in pairs.tolist()]
    return Family(
        torch.full_like(ids, -1).masked_scatter(seen, labels),
        [(f"any character after {xy}", f"after {xy}") for xy in spelled],
        what=False,
    )


def place_in_word(letter: torch.Tensor) -> Family:
    """The first … WORD_PLACES-th letter of a word, from which characters are letters (N,) bool."""
    first = letter & ~(previous(letter.long()) == 1)  # (N,): a letter after a non-letter or the start
    place = torch.arange(letter.numel()) - running_start(first)  # (N,): 0 for a word's first letter
    labels = torch.where(letter & (place < WORD_PLACES), place, -1)
    names = [(f"the {o} letter of a word", f"as the {o} letter of a word") for o in ORDINALS[:WORD_PLACES]]
    return Family(labels, names, what=False)


def column(codes: torch.Tensor) -> Family:
    """The first … COLUMNS-th character of a line (a newline ends its line), from code points (N,)."""
    starts = previous((codes == 10).long()) == 1  # (N,): just after a newline
    if starts.numel():
        starts[0] = True
    col = torch.arange(codes.numel()) - running_start(starts)  # (N,)
    labels = torch.where(col < COLUMNS, col, -1)
    names = [(f"the {o} character of a line", f"as the {o} character of a line") for o in ORDINALS[:COLUMNS]]
    return Family(labels, names, what=False)


def speaker_line(codes: torch.Tensor, member: dict[str, torch.Tensor]) -> Family:
    """The characters of a line (not its newline) that is a capitalised name and a colon: 'First Citizen:'."""
    newline = codes == 10  # (N,)
    line = newline.long().cumsum(dim=0) - newline.long()  # (N,): the newline belongs to the line it ends
    lines = int(line[-1]) + 1 if codes.numel() else 0
    colon = codes == ord(":")
    name = member["letter"] | (codes == ord(" ")) | (codes == ord("'")) | (codes == ord("-"))
    length = torch.bincount(line[~newline], minlength=lines)  # (lines,): per line
    colons = torch.bincount(line[colon], minlength=lines)
    strays = torch.bincount(line[~newline & ~name & ~colon], minlength=lines)
    start = torch.cat([torch.zeros(1, dtype=torch.long), newline.nonzero().squeeze(1) + 1])[
        :lines
    ]  # (lines,)
    first = start.clamp(max=max(codes.numel() - 1, 0))
    last = (start + length - 1).clamp(min=0, max=max(codes.numel() - 1, 0))
    named = (
        (length >= 2) & (colons == 1) & (strays == 0) & (codes[last] == ord(":")) & member["capital"][first]
    )
    labels = torch.where(named[line] & ~newline, 0, -1)
    return Family(
        labels, [("the characters of a speaker's line ('NAME:')", "on a speaker's line")], what=False
    )


def scored(family: Family, fires: torch.Tensor) -> list[tuple[Explanation, int]]:
    """Each label of a family that holds somewhere the unit fires, scored: (explanation, label)."""
    held = family.labels >= 0  # (N,)
    holds = torch.bincount(family.labels[held], minlength=len(family.names))  # (labels,)
    hits = torch.bincount(family.labels[held & fires], minlength=len(family.names))  # (labels,)
    fired = int(fires.sum())
    found = []
    for label in hits.nonzero().squeeze(1).tolist():
        alone = family.names[label][0]
        h, n = int(hits[label]), int(holds[label])
        found.append((Explanation(f"fires on {alone}", h / n, h / fired, n, h), label))
    return found


def paired(
    whats: list[tuple[Explanation, Family, int]],
    wheres: list[tuple[Explanation, Family, int]],
    fires: torch.Tensor,
) -> list[Explanation]:
    """Each "what" narrowed by each "where": 'fires on {what} {where}', scored."""
    fired = int(fires.sum())
    found = []
    for _, what, a in whats:
        is_what = what.labels == a  # (N,)
        for _, where, b in wheres:
            both = is_what & (where.labels == b)  # (N,)
            h, n = int((both & fires).sum()), int(both.sum())
            if h:
                words = f"fires on {what.names[a][0]} {where.names[b][1]}"
                found.append(Explanation(words, h / n, h / fired, n, h))
    return found


def widest(found: list[tuple[Explanation, Family, int]]) -> list[tuple[Explanation, Family, int]]:
    """The WIDE candidates with the highest recall (then precision): those a second description can narrow."""
    return sorted(found, key=lambda e: (-e[0].recall, -e[0].precision))[:WIDE]


def explain(
    text: str,
    acts: torch.Tensor,
    threshold: float = 0.0,
    count: int = 10,
    candidates: list[Family] | None = None,
) -> list[Explanation]:
    """The `count` descriptions of where a unit fires (acts > threshold) that fit best, best first.

    Args:
        text: N characters.
        acts: (N,) the unit's activation at each character.
        threshold: the unit fires where its activation is above this (0 for a dictionary feature).
        count: how many descriptions to return.
        candidates: `families(text)`, when many units of one text are described: built once, not per unit.
    Returns:
        Explanations by F1, then precision, then (for equal numbers) a single description before
        a pair; none when the unit never fires.
    """
    if acts.numel() != len(text):
        raise ValueError(f"acts has {acts.numel()} values for a text of {len(text)} characters")
    fires = acts.detach().flatten().cpu() > threshold  # (N,)
    if not fires.any():
        return []
    whats, wheres = [], []
    for family in candidates if candidates is not None else families(text):
        for explanation, label in scored(family, fires):
            (whats if family.what else wheres).append((explanation, family, label))
    pairs = paired(widest(whats), widest(wheres), fires)
    ranked = sorted([e for e, _, _ in whats + wheres] + pairs, key=lambda e: (-e.f1, -e.precision))
    return ranked[:count]


def top_contexts(
    text: str, acts: torch.Tensor, count: int = 10, before: int = 30, after: int = 10
) -> list[Context]:
    """The `count` strongest activations, each with up to `before` characters before it and `after` after.

    No two windows share a character: a unit strong on a run of neighbours would otherwise fill
    the list with one place seen from shifted windows, and the reader wants distinct examples.
    """
    if acts.numel() != len(text):
        raise ValueError(f"acts has {acts.numel()} values for a text of {len(text)} characters")
    left = acts.detach().flatten().float().cpu().nan_to_num(nan=float("-inf")).clone()  # (N,)
    found = []
    while len(found) < count and left.numel() and left.max() > float("-inf"):
        p = int(left.argmax())
        start = max(0, p - before)
        found.append(Context(p, float(acts.flatten()[p]), text[start : p + after + 1], p - start))
        left[max(0, p - before - after) : p + before + after + 1] = float(
            "-inf"
        )  # any window overlapping this one
    return found


def summary(explanations: list[Explanation]) -> str:
    """The best description on one line, with its precision and recall."""
    if not explanations:
        return "never fires"
    best = explanations[0]
    return f"{best.words} (precision {best.precision:.0%}, recall {best.recall:.0%})"
