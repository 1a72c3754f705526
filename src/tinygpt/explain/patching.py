"""Activation patching: which activations carry what makes the clean prompt's answer.

Two prompts of the same length, a clean one and a corrupted one (say a string written twice, and the
same with its first copy changed). At the last position the clean run prefers an answer character
over a versus character (by default its own prediction over the corrupted run's) by the logit
difference d_clean, the corrupted run by d_corrupted. Run the corrupted prompt again with one
activation taken from the clean run, read where it lands, and score

    (d_patched − d_corrupted) / (d_clean − d_corrupted)

0: that activation alone restores nothing; 1: it restores all of the clean answer. The activations
patched, one at a time, each read and replaced at its hook point (tinygpt.hooks):

    heads       each head's output, `blocks.L.attn.z[:, H]`, at every position       (n_layer, n_head)
    streams     the residual stream entering block L, `blocks.L.resid_pre`, at one
                position; the last row the final stream, `blocks.{n_layer-1}.resid_post` (n_layer + 1, T)

Every patched run is one row of a batch of corrupted prompts, CHUNK rows to a forward pass, each
row's hooks replacing only its own activation. Reference: Meng et al. 2022 ("causal tracing") and
Wang et al. 2022 ("Interpretability in the Wild") use the same measurement.
"""

import json
from dataclasses import dataclass

import torch

from tinygpt.errors import UserError
from tinygpt.explain.attribution import char_id
from tinygpt.explain.glyphs import glyph, pad, quoted
from tinygpt.explain.heatmap import THRESHOLDS, shade
from tinygpt.model import GPT
from tinygpt.tokenizer import CharTokenizer

CHUNK = 256  # patched runs per forward pass
Patch = tuple[str, int]  # (hook point, head or position it replaces there)


@dataclass
class Patching:
    """The scores of every patch of a clean/corrupted pair: 0 the corrupted run, 1 the clean one."""

    clean: list[str]  # the clean prompt's characters
    corrupted: list[str]
    answer: str
    versus: str
    clean_difference: float  # answer's logit minus versus's at the last position, clean run
    corrupted_difference: float
    heads: torch.Tensor  # (n_layer, n_head)
    streams: torch.Tensor  # (n_layer + 1, T): resid_pre of each block, then the final stream

    def stream_rows(self) -> list[str]:
        n = self.streams.size(0) - 1
        return [f"resid_pre {layer}" for layer in range(n)] + ["final"]

    def as_dict(self) -> dict:
        return {
            "clean": "".join(self.clean),
            "corrupted": "".join(self.corrupted),
            "answer": self.answer,
            "versus": self.versus,
            "clean_difference": self.clean_difference,
            "corrupted_difference": self.corrupted_difference,
            "heads": {
                f"{layer}.{h}": v for layer, row in enumerate(self.heads.tolist()) for h, v in enumerate(row)
            },
            "streams": dict(zip(self.stream_rows(), self.streams.tolist(), strict=True)),
        }


def patches(model: GPT, length: int) -> list[Patch]:
    """Every patch, in the order the grids read them: heads layer by layer, then streams row by row."""
    c = model.config
    heads = [(f"blocks.{layer}.attn.z", h) for layer in range(c.n_layer) for h in range(c.n_head)]
    rows = [f"blocks.{layer}.resid_pre" for layer in range(c.n_layer)] + [
        f"blocks.{c.n_layer - 1}.resid_post"
    ]
    return heads + [(name, t) for name in rows for t in range(length)]


def patched_hooks(plan: list[Patch], clean: dict[str, torch.Tensor]) -> dict:
    """Hooks under which row b of a batch of corrupted prompts has plan[b] taken from the clean run."""
    rows: dict[str, tuple[list[int], list[int]]] = {}
    for b, (name, index) in enumerate(plan):
        rows.setdefault(name, ([], []))[0].append(b)
        rows[name][1].append(index)

    def replace(x: torch.Tensor, name: str) -> torch.Tensor:
        b, i = (torch.tensor(r, device=x.device) for r in rows[name])
        x = x.clone()  # attn.z (B, nh, T, hs): head i at every position; a stream (B, T, C): position i
        x[b, i] = clean[name][0, i].to(x.dtype)
        return x

    return {name: replace for name in rows}


@torch.no_grad()
def patched_differences(
    model: GPT, clean_ids: list[int], corrupted_ids: list[int], plan: list[Patch], answer: int, versus: int
) -> torch.Tensor:
    """answer's logit minus versus's at the last position of the corrupted prompt, once per patch of
    plan: (len(plan),)."""
    model.eval()
    device = model.wte.weight.device
    _, clean = model.run_with_cache(torch.tensor([clean_ids], device=device), sorted({n for n, _ in plan}))
    corrupted = torch.tensor([corrupted_ids], device=device)  # (1, T)
    found = []
    for start in range(0, len(plan), CHUNK):
        chunk = plan[start : start + CHUNK]
        with model.hooks(patched_hooks(chunk, clean)):
            logits, _ = model(corrupted.expand(len(chunk), -1))  # (B, T, vocab)
        found.append((logits[:, -1, answer] - logits[:, -1, versus]).float().cpu())
    return torch.cat(found) if found else torch.zeros(0)


def _defaults(answer: str | None, versus: str | None) -> str:
    """Where the two characters came from, for the message that they are the same."""
    if answer is None and versus is None:
        return " (by default, the clean and the corrupted runs' predictions)"
    if answer is None:
        return " (--answer by default: the clean run's prediction)"
    if versus is None:
        return " (--versus by default: the corrupted run's prediction)"
    return ""


@torch.no_grad()
def patching(
    model: GPT,
    tokenizer: CharTokenizer,
    clean_ids: list[int],
    corrupted_ids: list[int],
    answer: str | None = None,
    versus: str | None = None,
) -> Patching:
    """Every head's output and every stream position patched from the clean run into the corrupted one."""
    if len(clean_ids) != len(corrupted_ids):
        raise UserError(
            f"--clean has {len(clean_ids)} characters and --corrupted {len(corrupted_ids)}; patching "
            "takes activations position by position, so give two prompts of the same length"
        )
    device = model.wte.weight.device
    model.eval()
    clean_logits = model(torch.tensor([clean_ids], device=device))[0][0, -1]  # (vocab,)
    corrupted_logits = model(torch.tensor([corrupted_ids], device=device))[0][0, -1]
    a = int(clean_logits.argmax()) if answer is None else char_id(tokenizer, answer, "--answer")
    v = int(corrupted_logits.argmax()) if versus is None else char_id(tokenizer, versus, "--versus")
    if a == v:
        raise UserError(
            f"--answer and --versus are both {quoted(tokenizer.chars[a])}{_defaults(answer, versus)}; "
            "a logit difference needs two characters: give --versus"
        )
    d_clean = float(clean_logits[a] - clean_logits[v])
    d_corrupted = float(corrupted_logits[a] - corrupted_logits[v])
    if abs(d_clean - d_corrupted) < 1e-6 * max(1.0, abs(d_clean)):
        raise UserError(
            f"the clean and corrupted prompts give the same logit difference ({d_clean:+.4f}) between "
            f"{quoted(tokenizer.chars[a])} and {quoted(tokenizer.chars[v])}: nothing to restore; "
            "choose prompts (or --answer, --versus) the model tells apart"
        )
    plan = patches(model, len(clean_ids))
    scores = (patched_differences(model, clean_ids, corrupted_ids, plan, a, v) - d_corrupted) / (
        d_clean - d_corrupted
    )
    c = model.config
    heads = scores[: c.n_layer * c.n_head].view(c.n_layer, c.n_head)
    streams = scores[c.n_layer * c.n_head :].view(c.n_layer + 1, len(clean_ids))
    chars = tokenizer.chars
    return Patching(
        [chars[i] for i in clean_ids],
        [chars[i] for i in corrupted_ids],
        chars[a],
        chars[v],
        d_clean,
        d_corrupted,
        heads,
        streams,
    )


def cell(score: float) -> str:
    """Two columns for a score: the heatmap's shades from 0 to 1 (full above), -- at −0.1 and below."""
    return "--" if score <= -THRESHOLDS[0] else shade(min(score, 1.0)) * 2


def patching_text(found: Patching) -> str:
    """The heads grid (layers × heads, with the numbers) and the streams grid (rows × positions) as text."""
    clean, corrupted = "".join(map(glyph, found.clean)), "".join(map(glyph, found.corrupted))
    lines = [
        f"activation patching: clean {clean}, corrupted {corrupted}",
        f"score: the logit of {quoted(found.answer)} minus {quoted(found.versus)} at the last position, "
        f"0 = corrupted ({found.corrupted_difference:+.4f}), 1 = clean ({found.clean_difference:+.4f})",
        f"shades: ░ ≥ {THRESHOLDS[0]}  ▒ ≥ {THRESHOLDS[1]}  ▓ ≥ {THRESHOLDS[2]}  █ ≥ {THRESHOLDS[3]}; "
        f"-- at -{THRESHOLDS[0]} or below",
        "",
        "each head's output patched (blocks.L.attn.z), every position",
        ("        " + "".join(f"head {h:<6}" for h in range(found.heads.size(1)))).rstrip(),
    ]
    for layer, row in enumerate(found.heads.tolist()):
        lines.append(f"layer {layer} " + "".join(f"{cell(s)} {s:+6.3f}  " for s in row).rstrip())
    labels = found.stream_rows()
    width = max(map(len, labels))
    lines += ["", "the residual stream patched at one position (rows: where; columns: the position)"]
    lines.append(" " * (width + 2) + "".join(pad(glyph(c), 2) for c in found.clean).rstrip())
    marks = "".join("^ " if a != b else "  " for a, b in zip(found.clean, found.corrupted, strict=True))
    for label, row in zip(labels, found.streams.tolist(), strict=True):
        lines.append((f"{label:>{width}} │" + "".join(cell(s) for s in row)).rstrip())
    lines.append(" " * (width + 2) + marks.rstrip() + "   ^: where the corrupted prompt differs")
    return "\n".join(lines)


def patching_json(found: Patching) -> str:
    """`inspect --patch --json`: the two differences, every head's score and every stream's row."""
    return json.dumps(found.as_dict(), indent=2, ensure_ascii=False)
