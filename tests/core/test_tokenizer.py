import pytest

from tinygpt.errors import UserError
from tinygpt.tokenizer import CharTokenizer


def test_vocabulary_is_sorted_distinct_characters_and_round_trips_unicode():
    text = "Ünïcødé — 日本語 🙂 and plain\ntext"
    tok = CharTokenizer.from_text(text)
    assert tok.chars == sorted(set(text))
    assert tok.decode(tok.encode(text)) == text
    assert tok.encode(tok.chars[3]) == [3]


def test_unknown_characters_are_named_in_the_error():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(UserError, match=r"2 character\(s\).*'x', 'ü'"):
        tok.encode("abxcüx")
