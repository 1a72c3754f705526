"""Units described in words: built units whose firing rule is known get that rule back, with exact numbers."""

import re

import pytest
import torch

from tinygpt.explain.explanations import (
    Context,
    explain,
    explain_many,
    summary,
    top_contexts,
    top_contexts_many,
)

THE = "the cat then sat with them; this thin moth said they sing, she hid there\n" * 4
LINES = "Then we go.\nand so on\nHe said: Yes\nthen We Wait\nRomeo runs\n" * 3
PLAY = "First Citizen:\nBefore we proceed, hear me.\n\nALL:\nSpeak, speak.\nNote: not a name here\n"


def firing_on(text: str, pattern: str, group: int = 0) -> torch.Tensor:
    """acts (N,): 1.0 at the last character of each match of `pattern` (or of its group), else 0."""
    acts = torch.zeros(len(text))
    for match in re.finditer(pattern, text):
        acts[match.end(group) - 1] = 1.0
    return acts


def test_a_unit_firing_on_e_after_th_gets_exactly_that_description_first():
    best = explain(THE, firing_on(THE, "the"))[0]
    assert best.words == "fires on 'e' after 'th'"
    assert (best.precision, best.recall) == (1.0, 1.0)
    assert best.hits == best.holds == THE.count("the")


def test_a_unit_firing_on_capitals_after_a_newline_is_told_from_capitals_starting_any_line():
    """LINES starts with a capital that no newline precedes, and holds capitals mid-line and
    lines that start in lowercase: only 'a capital after ↵' fits exactly."""
    acts = firing_on(LINES, r"\n[A-Z]")
    found = explain(LINES, acts)
    assert found[0].words == "fires on a capital letter after '↵'"
    assert (found[0].precision, found[0].recall) == (1.0, 1.0)
    starting = next(
        e for e in found if e.words == "fires on a capital letter as the first character of a line"
    )
    assert (
        starting.recall == 1.0 and starting.precision == 8 / 9
    )  # the text's first capital follows no newline


def test_firing_on_a_random_half_of_the_places_halves_the_precision_and_keeps_the_recall():
    acts = firing_on(THE, "the")
    places = acts.nonzero().squeeze(1)
    half = places[
        torch.randperm(places.numel(), generator=torch.Generator().manual_seed(0))[: places.numel() // 2]
    ]
    acts[half] = 0.0
    e = next(e for e in explain(THE, acts) if e.words == "fires on 'e' after 'th'")
    assert e.recall == 1.0 and e.precision == (places.numel() - half.numel()) / places.numel()


def test_firing_on_every_place_and_as_many_others_halves_the_recall_and_keeps_the_precision():
    acts = firing_on(THE, "the")
    others = (acts == 0).nonzero().squeeze(1)
    extra = others[torch.randperm(others.numel(), generator=torch.Generator().manual_seed(1))]
    acts[extra[: int(acts.sum())]] = 1.0
    e = next(e for e in explain(THE, acts, count=1000) if e.words == "fires on 'e' after 'th'")
    assert e.precision == 1.0 and e.recall == 0.5


def test_a_threshold_decides_where_a_unit_fires():
    acts = firing_on(THE, "the") * 3.0 + firing_on(THE, "th") * 1.0  # 3 on the 'e', 1 on the 'h'
    assert explain(THE, acts, threshold=2.0)[0].words == "fires on 'e' after 'th'"
    both = next(
        e for e in explain(THE, acts, threshold=0.5, count=1000) if e.words == "fires on 'e' after 'th'"
    )
    assert both.precision == 1.0 and both.recall == THE.count("the") / (THE.count("the") + THE.count("th"))


def test_a_unit_on_the_first_letter_of_each_word_and_one_on_a_speakers_line():
    first = explain(THE, firing_on(THE, r"\b[a-z]"))[0]
    assert first.words == "fires on the first letter of a word" and (first.precision, first.recall) == (
        1.0,
        1.0,
    )
    acts = torch.zeros(len(PLAY))  # 1 on the whole of both name lines, not on their newlines
    for match in re.finditer(r"First Citizen:|ALL:", PLAY):
        acts[match.start() : match.end()] = 1.0
    speaker = explain(PLAY, acts)[0]
    assert speaker.words == "fires on the characters of a speaker's line ('NAME:')"
    assert (speaker.precision, speaker.recall) == (1.0, 1.0)  # "Note: not a name here" is not one


def test_spaces_newlines_and_characters_beyond_ascii_are_named_by_their_glyphs():
    text = "café au lait\nñandú y más\n"
    assert explain(text, firing_on(text, "é"))[0].words == "fires on 'é'"
    assert explain(text, firing_on(text, " "))[0].words == "fires on '␣'"
    assert explain(text, firing_on(text, "\n"))[0].words == "fires on '↵'"


def test_top_contexts_finds_the_strongest_places_one_per_window_and_marks_the_character():
    text = "abcdefghij" * 10  # 100 characters
    acts = torch.zeros(100)
    acts[[50, 52, 10, 90]] = torch.tensor([5.0, 4.0, 3.0, 2.0])
    acts[70] = float("nan")
    found = top_contexts(text, acts, count=3, before=4, after=2)
    assert [(c.position, c.value) for c in found] == [
        (50, 5.0),
        (10, 3.0),
        (90, 2.0),
    ]  # 52 shares 50's window
    assert [c.text[c.index] for c in found] == [text[50], text[10], text[90]]
    assert found[0].text == text[46:53] and found[0].index == 4
    edge = top_contexts(text, acts, count=1, before=80, after=80)[0]
    assert edge.text == text and edge.index == 50  # the window is cut at both ends of the text


def test_a_unit_that_never_fires_and_an_empty_text_get_empty_answers():
    assert explain(THE, torch.zeros(len(THE))) == []
    assert summary([]) == "never fires"
    assert explain("", torch.zeros(0)) == [] and top_contexts("", torch.zeros(0)) == []
    assert len(top_contexts("abc", torch.full((3,), float("nan")))) == 0
    with pytest.raises(ValueError, match="3 values for a text of 4"):
        explain("abcd", torch.zeros(3))


def test_the_summary_is_the_best_description_with_its_numbers():
    line = summary(explain(THE, firing_on(THE, "the")))
    assert line == "fires on 'e' after 'th' (precision 100%, recall 100%)"


def test_many_units_at_once_get_what_each_gets_alone_with_their_own_thresholds():
    """70 units (more than one chunk of pairs), each with its own threshold: the lists of `explain` one
    at a time, these built units' first descriptions included."""
    generator = torch.Generator().manual_seed(0)
    acts = torch.randn(70, len(THE), generator=generator)  # (U, N)
    acts[0], acts[1] = firing_on(THE, "the"), firing_on(THE, r"\b[a-z]")
    acts[2] = 0.0  # never fires
    thresholds = torch.rand(70, generator=generator)
    thresholds[:3] = 0.5
    many = explain_many(THE, acts, thresholds)
    assert many[0][0].words == "fires on 'e' after 'th'" and many[2] == []
    for unit, found in enumerate(many):
        assert found == explain(THE, acts[unit], float(thresholds[unit])), unit


def one_unit_at_a_time(text: str, acts: torch.Tensor, count: int, before: int, after: int) -> list[Context]:
    """top_contexts written plainly, one place at a time: what the batched search must give."""
    left = acts.float().nan_to_num(nan=float("-inf"), neginf=float("-inf")).clone()  # (N,)
    found = []
    while len(found) < count and left.numel() and left.max() > float("-inf"):
        p = int(left.argmax())
        start = max(0, p - before)
        found.append(Context(p, float(acts[p]), text[start : p + after + 1], p - start))
        left[max(0, p - before - after) : p + before + after + 1] = float("-inf")
    return found


def test_many_units_at_once_find_what_each_unit_alone_finds():
    """Ties (rounded values), silent units, NaN and -inf, and a unit with fewer places than asked."""
    g = torch.Generator().manual_seed(0)
    text = "".join(chr(97 + int(i)) for i in torch.randint(26, (300,), generator=g))
    acts = (torch.randn(40, 300, generator=g) * 4).round()  # (U, N): many ties
    acts[3] = float("-inf")
    acts[5, ::7] = float("nan")
    acts[6] = float("-inf")
    acts[6, 150] = 1.0  # one place only
    for count, before, after in ((10, 30, 10), (3, 4, 2), (50, 0, 0)):
        many = top_contexts_many(text, acts, count, before, after)
        assert many == [one_unit_at_a_time(text, a, count, before, after) for a in acts]
    assert top_contexts_many(text, acts, 10)[3] == [] and len(top_contexts_many(text, acts, 10)[6]) == 1
