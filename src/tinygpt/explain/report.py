"""`tinygpt inspect`: what a checkpoint holds, in words (config, vocabulary, parameters per module,
training record). With a prompt, it adds tinygpt.load(...).attention's heatmaps and .lens's rows."""

from pathlib import Path
from typing import Any

import torch

from tinygpt.explain.glyphs import escaped
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.model import GPT


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def parameter_table(model: GPT) -> list[tuple[str, int]]:
    """(module, parameters) rows: embeddings, one block's parts, all blocks, final norm, total.

    The LM head shares the token embedding's matrix, so it adds no parameters of its own.
    """
    block = model.h[0]
    rows = [
        ("wte (token embedding = lm_head, tied)", count(model.wte)),
        ("wpe (position embedding)", count(model.wpe)),
    ]
    parts = [
        ("ln_1", block.ln_1),
        ("attn.c_attn (Q/K/V)", block.attn.c_attn),
        ("attn.c_proj", block.attn.c_proj),
    ]
    if model.config.mlp:
        parts += [("ln_2", block.ln_2), ("mlp.c_fc", block.mlp.c_fc), ("mlp.c_proj", block.mlp.c_proj)]
    for name, part in parts:
        rows.append((f"  h.*.{name}", count(part)))
    rows.append((f"h.0 … h.{len(model.h) - 1} ({len(model.h)} blocks)", sum(count(b) for b in model.h)))
    rows.append(("ln_f (final layer norm)", count(model.ln_f)))
    total = model.num_params()
    assert sum(n for name, n in rows if not name.startswith(" ")) == total, "table covers every parameter"
    rows.append(("total", total))
    rows.append(("total without wpe (nanoGPT's count)", total - count(model.wpe)))
    return rows


def describe(path: str | Path) -> str:
    """A readable report of a checkpoint."""
    saved = read_checkpoint(path)
    model = saved.build_model(path)
    lines = [f"checkpoint: {path} (format version {saved.format_version})", "", "model config:"]
    lines += [f"  {k:<12} {v}" for k, v in saved.model_config.items()]
    chars = saved.chars
    lines += [
        "",
        f"vocabulary: {len(chars)} characters",
        "  " + "".join(map(escaped, chars)),
    ]
    lines += ["", "parameters:"]
    lines += [f"  {name:<40} {n:>12,}" for name, n in parameter_table(model)]
    lines += ["", "training record:"]
    lines += [f"  {k:<14} {_fmt(v)}" for k, v in saved.record.items()]
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if value < 1e3 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
