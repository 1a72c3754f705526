"""Attention heatmaps in the terminal, and the characters they print."""

import torch

from tinygpt.app.cli import main
from tinygpt.explain.glyphs import glyph, pad, quoted, width
from tinygpt.explain.heatmap import SHADES, heatmap, legend, shade, top_next


def test_glyphs_make_every_character_visible_and_safe():
    assert [glyph(c) for c in "\n\t \x1b\x7fa😀"] == ["↵", "⇥", "·", "␛", "␡", "a", "😀"]
    assert glyph("\u0301") == "◌\u0301"  # a combining accent sits on a dotted circle
    assert glyph("\u2028") == "�"  # a line separator would break the grid
    assert [width(glyph(c)) for c in "a😀\u0301\n"] == [1, 2, 1, 1]
    assert width(pad("😀", 3)) == 3 and pad("a", 2) == "a "
    assert [quoted(c) for c in "a\n'\\\x1b"] == ["'a'", "'\\n'", '"\'"', "'\\\\'", "'\\x1b'"]


def test_shades_step_with_the_weight():
    assert [shade(w) for w in (0.0, 0.09, 0.1, 0.29, 0.3, 0.5, 0.69, 0.7, 1.0)] == list("  ░░▒▓▓██")
    assert all(s in legend() for s in SHADES[1:])


def test_heatmap_rows_are_queries_and_columns_keys():
    weights = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.4, 0.6, 0.0, 0.0],
            [0.05, 0.15, 0.8, 0.0],
            [0.25, 0.25, 0.25, 0.25],
        ]
    )
    lines = heatmap(weights, ["a", "\n", "😀", " "], "layer 0 head 0").splitlines()
    assert lines == [
        "layer 0 head 0",
        "      a ↵ 😀·",
        "0 a │ ██",
        "1 ↵ │ ▒▒▓▓",
        "2 😀│   ░░██",
        "3 · │ ░░░░░░░░",
        "    └─────────",
    ]
    assert len({width(line.split("│")[0]) for line in lines[2:-1]}) == 1, "rows line up, emoji and all"


def test_top_next_lists_the_likeliest_characters():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]]))
    lines = top_next(logits, ["x", "y"], ["x", "\n", "z"], k=5).splitlines()
    assert lines == [
        "top 3 next characters after each position:",
        "0 x → ↵  0.600  z  0.300  x  0.100",
        "1 y → x  0.500  z  0.300  ↵  0.200",
    ]


def test_inspect_with_a_prompt_shows_each_head(odd_checkpoint, capsys):
    assert main(["inspect", str(odd_checkpoint), "--prompt", "<b>Tom & 😀", "--layer", "1"]) == 0
    out = capsys.readouterr().out
    assert "parameters:" in out, "the usual report comes first"
    assert "layer 1 head 0" in out and "layer 1 head 1" in out and "layer 0 head" not in out
    assert "attention on <b>Tom·&·😀 (10 characters" in out
    assert out.count("→") == 10, "a top-5 line per position"
    grid = out[out.index("layer 1 head 0") :].splitlines()[2:12]
    assert all(set(row.split("│ ")[1]) <= set(SHADES) for row in grid)
    assert main(["inspect", str(odd_checkpoint), "--head", "1"]) == 2
    assert "add --prompt" in capsys.readouterr().err
    assert main(["inspect", str(odd_checkpoint), "--prompt", "x", "--head", "2"]) == 2
    assert "head 2 does not exist" in capsys.readouterr().err
