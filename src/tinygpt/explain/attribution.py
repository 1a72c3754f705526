"""Direct logit attribution: which part of the residual stream wrote a logit.

The stream that reaches the final layer norm at a position is a sum of parts, each read at a hook
point (tinygpt.hooks) or taken from a weight:

    embed               the token embedding (`embed`)
    pos_embed           the position embedding (`pos_embed`)
    L.H                 head H of layer L: its output `blocks.L.attn.z[:, H]` through its own columns
                        of c_proj, no bias (tinygpt.explain.trace.head_contributions)
    attn bias L         layer L's c_proj bias, which its heads share (one per layer, so that a
                        layer's heads and its bias add up to what the layer wrote, `blocks.L.attn_out`)
    mlp L               what layer L's MLP adds (`blocks.L.mlp_out`, its own c_proj bias included)

The logit of character c is ln_f(x)·W_U[c]. With σ, the layer norm's scale at this position, held
at the value it has there (σ = √(var(x) + 1e-5)), ln_f(x) = (x − mean(x))/σ·γ + β is a sum over the
parts, so each part p contributes (p − mean(p))/σ·γ·W_U[c], and β·W_U[c] is one more part,
`ln_f bias`. The parts add up to the model's own logit. For the difference between two characters'
logits, W_U[c] − W_U[c'] takes the place of W_U[c]. A model built without biases has no bias parts.
The idea is the "direct path" of Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits".

With a feature dictionary of a layer's `mlp_out` (`tinygpt features`), `mlp L` is split further, at the
position scored, into what the dictionary makes of it: each feature that fires, z_f·W_dec[f] (in the
layer's units: divided by the dictionary's input scale), `mlp L feature F`; the decoder's bias, `mlp L
dictionary bias`; and what the dictionary misses, x − x̂, `mlp L error`. They add up to the MLP's output,
so the parts still add up to the logit.
"""

import json
from dataclasses import dataclass

import torch

from tinygpt.errors import UserError
from tinygpt.explain.dictionary import TopKDictionary
from tinygpt.explain.glyphs import glyph, pad, quoted
from tinygpt.explain.trace import head_contributions
from tinygpt.model import GPT
from tinygpt.tokenizer import CharTokenizer

LN_EPS = 1e-5  # model.LayerNorm's epsilon
BAR = 24  # terminal columns of the longest bar


@dataclass
class LogitParts:
    """One logit (or difference of two) at one position of a prompt, split into the parts that wrote it."""

    tokens: list[str]  # the prompt's characters
    position: int  # counted from 0
    target: str  # the character whose logit is split
    versus: str | None  # with it: the logit of target minus the logit of versus
    logit: float  # the model's own logit (or difference)
    parts: dict[str, float]  # part name -> what it adds, in the order the model computes them

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def as_dict(self) -> dict:
        return {
            "prompt": "".join(self.tokens),
            "position": self.position,
            "target": self.target,
            "versus": self.versus,
            "logit": self.logit,
            "sum": self.total,
            "parts": self.parts,
        }


@torch.no_grad()
def stream_parts(model: GPT, idx: torch.Tensor) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor]:
    """For ids idx (B, T): the parts' names, the parts (P, B, T, C) that add up to the final residual
    stream, that stream as the model computed it (B, T, C), and the logits (B, T, vocab)."""
    model.eval()
    last = f"blocks.{model.config.n_layer - 1}.resid_post"
    mlp_out = ["blocks.*.mlp_out"] if model.config.mlp else []  # none in an attention-only model
    logits, found = model.run_with_cache(idx, ["embed", "pos_embed", "blocks.*.attn.z", *mlp_out, last])
    B, T = idx.shape
    parts = {"embed": found["embed"], "pos_embed": found["pos_embed"].expand(B, T, -1)}
    for layer, block in enumerate(model.h):
        z = found[f"blocks.{layer}.attn.z"]  # (B, nh, T, hs)
        heads = torch.stack([head_contributions(block.attn.c_proj.weight, zb) for zb in z])  # (B, nh, T, C)
        for h in range(model.config.n_head):
            parts[f"{layer}.{h}"] = heads[:, h]
        if block.attn.c_proj.bias is not None:
            parts[f"attn bias {layer}"] = block.attn.c_proj.bias.expand(B, T, -1)
        if model.config.mlp:
            parts[f"mlp {layer}"] = found[f"blocks.{layer}.mlp_out"]
    return list(parts), torch.stack(list(parts.values())), found[last], logits


def through_ln_f(
    model: GPT, parts: torch.Tensor, stream: torch.Tensor, direction: torch.Tensor
) -> torch.Tensor:
    """What each part adds along direction (C,) through ln_f with its scale frozen: parts (P, ..., C),
    stream (..., C) the final residual stream -> (P + 1, ...), the last row ln_f's bias (0 without one)."""
    x = stream.double()
    sigma = torch.sqrt(x.var(dim=-1, unbiased=False) + LN_EPS)  # (...,)
    read = model.ln_f.weight.double() * direction.double()  # (C,): γ·W_U[c], what a normalised part meets
    p = parts.double()
    values = ((p - p.mean(dim=-1, keepdim=True)) @ read) / sigma  # (P, ...)
    bias = model.ln_f.bias
    beta = (bias.double() @ direction.double()) if bias is not None else torch.zeros((), dtype=torch.float64)
    return torch.cat([values, beta.expand(1, *values.shape[1:])])


@torch.no_grad()
def feature_parts(dictionary: TopKDictionary, layer: int, x: torch.Tensor) -> tuple[list[str], torch.Tensor]:
    """An MLP's output x (C,) at one position split by its dictionary: each firing feature's write, the
    decoder's bias and the error x − x̂; their names, and the parts (P, C), which add up to x."""
    s = dictionary.input_scale
    z = dictionary.encode(x.float().cpu().unsqueeze(0))[0]  # (n,)
    fired = z.nonzero().flatten()  # (F,)
    writes = z[fired, None] * dictionary.W_dec[fired] / s  # (F, C)
    bias = dictionary.b_dec / s  # (C,)
    error = x.float().cpu() - (writes.sum(dim=0) + bias)  # x − x̂
    names = [f"mlp {layer} feature {f}" for f in fired.tolist()]
    names += [f"mlp {layer} dictionary bias", f"mlp {layer} error"]
    return names, torch.cat([writes, bias[None], error[None]]).to(x.device)


def split_mlps(
    names: list[str], parts: torch.Tensor, dictionaries: dict[int, TopKDictionary]
) -> tuple[list[str], torch.Tensor]:
    """names and parts (P, C) with each `mlp L` whose layer has a dictionary split into its features."""
    split_names, split = [], []
    for name, part in zip(names, parts, strict=True):
        layer = int(name.split()[1]) if name.startswith("mlp ") else None
        if layer in dictionaries:
            more_names, more = feature_parts(dictionaries[layer], layer, part)
            split_names += more_names
            split += list(more)
        else:
            split_names.append(name)
            split.append(part.float())
    return split_names, torch.stack(split)


def position_of(position: int, length: int) -> int:
    """A position in a prompt of `length` characters, from 0, or negative counting from the end."""
    if not -length <= position < length:
        raise UserError(
            f"--position {position} is outside the prompt of {length} characters: use 0 … {length - 1}, "
            f"or -{length} … -1 counting from the end"
        )
    return position % length


def char_id(tokenizer: CharTokenizer, char: object, option: str) -> int:
    """The id of one character given as --target, --versus, --answer: one character of the vocabulary."""
    if not isinstance(char, str) or len(char) != 1:
        shown = repr(char) if isinstance(char, str) else f"{char!r} (a {type(char).__name__})"
        raise UserError(f"{option} {shown} is not one character; give one character, e.g. {option} e")
    if char not in tokenizer.ids:
        raise UserError(
            f"{option} {quoted(char)} is not in the model's vocabulary; use one of its "
            f"{tokenizer.vocab_size} characters"
        )
    return tokenizer.ids[char]


def logit_parts(
    model: GPT,
    tokenizer: CharTokenizer,
    ids: list[int],
    position: int,
    target: str | None,
    versus: str | None,
    dictionaries: dict[int, TopKDictionary] | None = None,
) -> LogitParts:
    """The logit of target (default: the character the model predicts) at position, or target's minus
    versus's, split into the parts of the residual stream; dictionaries: the mlp_out dictionary of each
    layer whose MLP is split into its features."""
    at = position_of(position, len(ids))
    names, parts, stream, logits = stream_parts(model, torch.tensor([ids], device=model.wte.weight.device))
    row = logits[0, at]  # (vocab,)
    t = int(row.argmax()) if target is None else char_id(tokenizer, target, "--target")
    v = None if versus is None else char_id(tokenizer, versus, "--versus")
    if v == t:
        said = "--target's" if target is not None else "the one the model predicts here (--target's default)"
        raise UserError(f"--versus {quoted(versus)} is {said} character; a difference needs two characters")
    direction = model.lm_head.weight[t] - (model.lm_head.weight[v] if v is not None else 0)  # (C,)
    names, parts = split_mlps(names, parts[:, 0, at], dictionaries or {})  # (P, C)
    values = through_ln_f(model, parts, stream[0, at], direction)  # (P + 1,)
    logit = row[t] - (row[v] if v is not None else 0)
    chars = [tokenizer.chars[i] for i in ids]
    found = dict(zip([*names, "ln_f bias"], values.tolist(), strict=True))
    if model.ln_f.bias is None:
        del found["ln_f bias"]
    versus_char = tokenizer.chars[v] if v is not None else None
    return LogitParts(chars, at, tokenizer.chars[t], versus_char, float(logit), found)


def parts_text(found: LogitParts, k: int | None = None) -> str:
    """The parts as a terminal bar list, largest first (the k largest in size only, when given)."""
    what = f"the logit of {quoted(found.target)}"
    if found.versus is not None:
        what = f"the logit of {quoted(found.target)} minus the logit of {quoted(found.versus)}"
    shown = "".join(glyph(c) for c in found.tokens)
    at = found.position
    lines = [
        f"direct logit attribution on {shown}: {what} after position {at} ({glyph(found.tokens[at])})",
        f"the model's {'difference' if found.versus else 'logit'} {found.logit:+.4f}; "
        f"the parts add up to {found.total:+.4f}",
    ]
    ordered = sorted(found.parts.items(), key=lambda kv: -kv[1])
    if k is not None:
        kept = {name for name, _ in sorted(ordered, key=lambda kv: -abs(kv[1]))[:k]}
        ordered = [kv for kv in ordered if kv[0] in kept]
    top = max((abs(v) for _, v in ordered), default=0.0) or 1.0
    width = max(len(name) for name, _ in ordered)
    for name, value in ordered:
        n = round(BAR * abs(value) / top)
        left, right = ("█" * n if value < 0 else "", "█" * n if value > 0 else "")
        lines.append(f"  {pad(name, width)} {value:+9.4f}  {left:>{BAR}}│{right}")
    lines.append("each part through ln_f with its scale at this position held fixed (explain/attribution.py)")
    return "\n".join(lines)


def parts_json(found: LogitParts) -> str:
    """`inspect --attribution --json`: the logit, the sum of the parts and every part by name."""
    return json.dumps(found.as_dict(), indent=2, ensure_ascii=False)
