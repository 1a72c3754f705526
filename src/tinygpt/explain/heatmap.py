"""Attention in the terminal: each head's weights as a grid of shade blocks, and the next-character guesses.

    layer 0 head 1   (rows: query, columns: key it attends to)
           T o · b
     0 T │ ██
     1 o │ ▓▓░░
     2 · │ ▒▒░░░░
     3 b │ ░░  ▒▒▒▒

Each cell is two columns wide, so a wide character (an emoji) fits its column.
"""

import torch

from tinygpt.explain.glyphs import glyph, pad
from tinygpt.explain.trace import Trace
from tinygpt.tokenizer import CharTokenizer

SHADES = " ░▒▓█"  # weight 0 … 1 in five steps
THRESHOLDS = (0.1, 0.3, 0.5, 0.7)  # where each shade after the blank begins
CELL = 2  # terminal columns per cell


def shade(weight: float) -> str:
    """The block for a weight: blank below 0.1, then ░ from 0.1, ▒ from 0.3, ▓ from 0.5, █ from 0.7."""
    return SHADES[sum(weight >= t for t in THRESHOLDS)]


def legend() -> str:
    steps = "  ".join(f"{s} ≥ {t}" for s, t in zip(SHADES[1:], THRESHOLDS, strict=True))
    return f"shades by weight: {steps}; blank: below {THRESHOLDS[0]}, or a masked future position"


def heatmap(weights: torch.Tensor, chars: list[str], title: str) -> str:
    """One head's (T, T) attention weights as rows of shade blocks, the characters on both axes."""
    T = len(chars)
    index_width = len(str(T - 1))
    margin = " " * (index_width + 3)  # room for "12 ↵ " before the grid
    lines = [title, (margin + "  " + "".join(pad(glyph(c), CELL) for c in chars)).rstrip()]
    for i, char in enumerate(chars):
        cells = "".join(shade(w) * CELL for w in weights[i, : i + 1].tolist())
        lines.append(f"{i:>{index_width}} {pad(glyph(char), 2)}│ {cells}".rstrip())
    lines.append(margin + "└" + "─" * (CELL * T + 1))
    return "\n".join(lines)


def top_next(logits: torch.Tensor, chars: list[str], vocab: list[str], k: int = 5) -> str:
    """For each position, the k likeliest next characters with their probabilities."""
    probs = torch.softmax(logits.float(), dim=-1)  # (T, vocab)
    top = probs.topk(min(k, len(vocab)), dim=-1)
    index_width = len(str(len(chars) - 1))
    lines = [f"top {top.indices.size(1)} next characters after each position:"]
    for i, char in enumerate(chars):
        guesses = "  ".join(
            f"{pad(glyph(vocab[j]), 2)} {p:.3f}"
            for p, j in zip(top.values[i].tolist(), top.indices[i].tolist(), strict=True)
        )
        lines.append(f"{i:>{index_width}} {pad(glyph(char), 2)}→ {guesses}")
    return "\n".join(lines)


def attention_view(trace: Trace, tokenizer: CharTokenizer, layers: list[int], heads: list[int]) -> str:
    """Heatmaps for the chosen layers and heads, then the next-character table."""
    chars = [tokenizer.chars[i] for i in trace.ids]
    shown = "".join(glyph(c) for c in chars)
    blocks = [f"attention on {shown} ({len(chars)} characters; ↵ newline, · space)", legend()]
    for layer in layers:
        for head in heads:
            title = f"layer {layer} head {head}   (rows: query, columns: the key it attends to)"
            blocks.append(heatmap(trace.layers[layer].weights[head], chars, title))
    blocks.append(top_next(trace.logits, chars, tokenizer.chars))
    return "\n\n".join(blocks)
