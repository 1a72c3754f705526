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

UNITS_AT_ONCE = 64  # units top_contexts_many searches together: (64, N) floats, within the cache
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


@dataclass
class Candidates:
    """Every single description of a text side by side, one per (family, label): K candidates."""

    families: list[Family]
    labels: torch.Tensor  # (F, N) long: each family's label at each character
    family: torch.Tensor  # (K,) long: the family of each candidate
    label: torch.Tensor  # (K,) long: its label in that family
    what: torch.Tensor  # (K,) bool: a "what" (else a "where")
    holds: torch.Tensor  # (K,) float64: characters where it holds

    def words(self, k: int, after_what: bool = False) -> str:
        """Candidate k in words: alone, or (after_what) as it reads after a "what"."""
        return self.families[int(self.family[k])].names[int(self.label[k])][int(after_what)]

    def masks(self) -> torch.Tensor:
        """Where each candidate holds: (K, N) float, 1 or 0 (products of them count characters, exactly
        in float32 below 2^24 of them)."""
        return (self.labels[self.family] == self.label.unsqueeze(-1)).float()


def candidates(text: str) -> Candidates:
    """The candidate descriptions of a text, built once for any number of units."""
    found = families(text)
    sizes = [len(f.names) for f in found]
    index = torch.arange(len(found))
    return Candidates(
        found,
        torch.stack([f.labels for f in found]) if found else torch.zeros(0, len(text), dtype=torch.long),
        index.repeat_interleave(torch.tensor(sizes)),
        torch.cat([torch.arange(n) for n in sizes]),
        torch.tensor([f.what for f in found]).repeat_interleave(torch.tensor(sizes)),
        torch.cat(
            [torch.bincount(f.labels[f.labels >= 0], minlength=n) for f, n in zip(found, sizes, strict=True)]
        ).double(),
    )


def ranked(first: torch.Tensor, second: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Candidate indices per unit (K, U) -> (K, U): by `first` then `second`, both highest first, ties in
    candidate order (as a stable sort of a list in that order); the invalid ones last."""
    low = torch.tensor(float("-inf"), dtype=first.dtype)
    by_second = torch.sort(-torch.where(valid, second, low), dim=0, stable=True).indices
    then = torch.sort(-torch.where(valid, first, low).gather(0, by_second), dim=0, stable=True).indices
    return by_second.gather(0, then)


def f1_of(precision: torch.Tensor, recall: torch.Tensor) -> torch.Tensor:
    """Explanation.f1 elementwise, in the same float64 operations (0 where both are 0)."""
    total = precision + recall
    return torch.where(total > 0, 2 * precision * recall / total.clamp(min=1e-300), torch.zeros_like(total))


def widest_of(c: Candidates, precision, recall, valid, what: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The WIDE "what"s (or "where"s) per unit with the highest recall, then precision, that hold where
    the unit fires: indices (WIDE, U) and which of them exist (WIDE, U) bool."""
    mine = valid & (c.what == what).unsqueeze(1)  # (K, U)
    order = ranked(recall, precision, mine)[:WIDE]  # (≤WIDE, U)
    return order, mine.gather(0, order)


def paired_scores(
    c: Candidates, masks: torch.Tensor, fires: torch.Tensor, precision, recall, valid, chunk: int = 64
) -> tuple:
    """Each unit's WIDE widest "what"s narrowed by its WIDE widest "where"s: the pairs a-major
    (a·WIDE + b), as (P, U) tensors hits, holds, and the what and where candidate of each pair.
    masks (K, N): c.masks(); fires (U, N) float.

    Where a pair holds does not depend on the unit: one product of every candidate's mask with every
    other's gives it for all pairs."""
    whats, has_what = widest_of(c, precision, recall, valid, True)  # (W1, U)
    wheres, has_where = widest_of(c, precision, recall, valid, False)  # (W2, U)
    W1, W2 = whats.size(0), wheres.size(0)
    what_of = whats.repeat_interleave(W2, dim=0)  # (W1·W2, U)
    where_of = wheres.repeat(W1, 1)
    holds = (masks @ masks.T)[what_of, where_of].double()  # (W1·W2, U)
    hits = []
    for u in range(0, fires.size(0), chunk):
        a = masks[whats[:, u : u + chunk].T] * fires[u : u + chunk].unsqueeze(1)  # (u, W1, N)
        b = masks[wheres[:, u : u + chunk].T]  # (u, W2, N)
        hits.append((a @ b.transpose(1, 2)).flatten(1))  # (u, W1·W2)
    exists = (has_what.unsqueeze(1) & has_where.unsqueeze(0)).flatten(0, 1)  # (W1·W2, U)
    h = torch.cat(hits).T.double() if hits else torch.zeros(W1 * W2, 0, dtype=torch.float64)
    return h * exists, holds, what_of, where_of


def explain_many(
    text: str, acts: torch.Tensor, thresholds: torch.Tensor | float = 0.0, count: int = 10
) -> list[list[Explanation]]:
    """`explain` for many units at once, the text's candidates built once: acts (U, N), thresholds a
    float or (U,); the same lists, unit by unit, that `explain` gives."""
    if acts.size(-1) != len(text):
        raise ValueError(f"acts has {acts.size(-1)} values for a text of {len(text)} characters")
    limits = torch.as_tensor(thresholds, dtype=acts.dtype).reshape(-1, 1)  # (U or 1, 1)
    fires = acts.detach().cpu() > limits.cpu()  # (U, N)
    if not fires.any():
        return [[] for _ in range(acts.size(0))]
    c = candidates(text)
    fired = fires.sum(dim=1).double()  # (U,)
    masks = c.masks()  # (K, N)
    hits = (masks @ fires.T.float()).double()  # (K, U): how often each candidate holds where each unit fires
    precision, recall = hits / c.holds.clamp(min=1).unsqueeze(1), hits / fired.clamp(min=1)
    valid = hits > 0
    singles = ranked(f1_of(precision, recall), precision, valid)[:count]  # (≤count, U)
    h, n, what_of, where_of = paired_scores(c, masks, fires.float(), precision, recall, valid)
    p2, r2 = h / n.clamp(min=1), h / fired.clamp(min=1)
    pairs = ranked(f1_of(p2, r2), p2, h > 0)[:count]  # (≤count, U)
    whats, wheres = what_of.tolist(), where_of.tolist()
    holds = c.holds.unsqueeze(1).expand_as(hits)  # (K, U)
    single = picked(singles, valid, (precision, recall, holds, hits), lambda k, u: f"fires on {c.words(k)}")
    pair = picked(
        pairs,
        h > 0,
        (p2, r2, n, h),
        lambda p, u: f"fires on {c.words(whats[p][u])} {c.words(wheres[p][u], True)}",
    )
    return [
        sorted(a + b, key=lambda e: (-e.f1, -e.precision))[:count] for a, b in zip(single, pair, strict=True)
    ]


def picked(order, valid, numbers, words) -> list[list[Explanation]]:
    """Unit by unit, an Explanation for each candidate that `order` (≤count, U) picks and `valid` (K, U)
    allows. numbers: its precision, recall, holds and hits, each (K, U), read once as lists;
    words(k, u): its words."""
    columns = [t.gather(0, order).T.tolist() for t in (valid, *numbers)]  # each (U, ≤count)
    found = []
    for u, (ks, *unit) in enumerate(zip(order.T.tolist(), *columns, strict=True)):
        found.append([
            Explanation(words(k, u), p, r, int(n), int(hit))
            for k, ok, p, r, n, hit in zip(ks, *unit, strict=True) if ok
        ])  # fmt: skip
    return found


def explain(text: str, acts: torch.Tensor, threshold: float = 0.0, count: int = 10) -> list[Explanation]:
    """The `count` descriptions of where a unit fires (acts > threshold) that fit best, best first.

    Args:
        text: N characters.
        acts: (N,) the unit's activation at each character.
        threshold: the unit fires where its activation is above this (0 for a dictionary feature).
        count: how many descriptions to return.
    Returns:
        Explanations by F1, then precision, then (for equal numbers) a single description before
        a pair; none when the unit never fires.
    """
    if acts.numel() != len(text):
        raise ValueError(f"acts has {acts.numel()} values for a text of {len(text)} characters")
    return explain_many(text, acts.flatten().unsqueeze(0), threshold, count)[0]


def top_contexts(
    text: str, acts: torch.Tensor, count: int = 10, before: int = 30, after: int = 10
) -> list[Context]:
    """The `count` strongest activations, each with up to `before` characters before it and `after` after.

    No two windows share a character: a unit strong on a run of neighbours would otherwise fill
    the list with one place seen from shifted windows, and the reader wants distinct examples.
    """
    if acts.numel() != len(text):
        raise ValueError(f"acts has {acts.numel()} values for a text of {len(text)} characters")
    return top_contexts_many(text, acts.flatten().unsqueeze(0), count, before, after)[0]


def top_contexts_many(
    text: str, acts: torch.Tensor, count: int = 10, before: int = 30, after: int = 10
) -> list[list[Context]]:
    """`top_contexts` for many units at once: acts (U, N) -> each unit's list, the same as one by one.

    Units go UNITS_AT_ONCE at a time (their copy stays in the CPU's cache); each round takes every
    unit's strongest place left (the first, on a tie) and rules out the characters around it that a
    window could share with another."""
    if acts.size(-1) != len(text):
        raise ValueError(f"acts has {acts.size(-1)} values for a text of {len(text)} characters")
    values = acts.detach().cpu()  # (U, N)
    reach = torch.arange(-(before + after), before + after + 1)  # (R,): the places a window could share
    found: list[list[Context]] = []
    for chunk in values.split(UNITS_AT_ONCE):
        left = chunk.float().nan_to_num(nan=float("-inf"), neginf=float("-inf"))  # (u, N), ruled out in place
        mine: list[list[Context]] = [[] for _ in range(chunk.size(0))]
        for _ in range(count if chunk.size(1) else 0):
            best, at = left.max(dim=1)  # (u,) each
            live = best > float("-inf")
            if not live.any():
                break
            for u, p in zip(live.nonzero().squeeze(1).tolist(), at[live].tolist(), strict=True):
                start = max(0, p - before)
                mine[u].append(Context(p, float(chunk[u, p]), text[start : p + after + 1], p - start))
            near = (at.unsqueeze(1) + reach).clamp(0, chunk.size(1) - 1)  # (u, R); a spent unit is all -inf
            left.scatter_(1, near, float("-inf"))
        found += mine
    return found


def summary(explanations: list[Explanation]) -> str:
    """The best description on one line, with its precision and recall."""
    if not explanations:
        return "never fires"
    best = explanations[0]
    return f"{best.words} (precision {best.precision:.0%}, recall {best.recall:.0%})"
