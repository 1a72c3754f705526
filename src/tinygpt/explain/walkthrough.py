"""The worked walkthrough: one character's trip through one attention head, every number printed.

In the order a reader follows the math, for token i of a prompt, layer L, head H:

    1. embedding:   x = wte[char] + wpe[i]  (and the residual stream entering layer L)
    2. layer norm:  ln_1(x) = (x − mean) / √(var + 1e-5) · weight + bias
    3. projection:  q_i, k_i, v_i of head H
    4. scores:      q_i · k_j / √d_head for j ≤ i; later positions masked (−∞)
    5. softmax:     subtract the max, exp, sum, divide
    6. output:      Σ_j weight_j · v_j, then through c_proj into the residual stream
    7. prediction:  the likeliest next characters after position i

The tensors come from the model's own forward pass (tinygpt.explain.trace); steps 4–6
are the formula of tinygpt.attention applied to the model's q, k and v, one row
at a time, so that every intermediate can be shown.
"""

import math
from dataclasses import dataclass

import torch

from tinygpt.attention import scaled_scores
from tinygpt.errors import UserError
from tinygpt.explain.backward import STEP_LR, RowBackward, backward_steps, check_lr, row_backward, step_lines
from tinygpt.explain.glyphs import num, quoted, vec
from tinygpt.explain.trace import Trace, focus
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer

SHOWN_TERMS = 3  # products of q·k written out before "…"


@dataclass
class RowArithmetic:
    """softmax(q·kᵀ/√d)·V for one query, with every intermediate kept (n keys, d and d_v wide)."""

    position: int  # the query's position: keys after it are masked
    dots: torch.Tensor  # (n,) q·k_j, unscaled
    scores: torch.Tensor  # (n,) q·k_j / √d, −inf where masked
    row_max: float  # the largest score, subtracted before exp
    exps: torch.Tensor  # (n,) exp(score − max), 0 where masked
    total: float  # Σ exps
    weights: torch.Tensor  # (n,) exps / total
    weighted: torch.Tensor  # (n, d_v) weight_j · v_j
    output: torch.Tensor  # (d_v,) Σ weighted


def row_arithmetic(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, position: int | None = None
) -> RowArithmetic:
    """One query (d,) against keys (n, d) and values (n, d_v), every step kept.

    Keys after `position` (default: the last) are masked.
    """
    n = keys.size(0)
    position = n - 1 if position is None else position
    dots = keys @ q  # (n,)
    scores = scaled_scores(q.unsqueeze(0), keys)[0]  # (n,)
    scores = scores.masked_fill(torch.arange(n) > position, float("-inf"))
    row_max = scores.max()
    exps = torch.exp(scores - row_max)  # (n,): masked entries give exp(−inf) = 0
    total = exps.sum()
    weights = exps / total
    weighted = weights.unsqueeze(1) * values  # (n, d_v)
    return RowArithmetic(
        position, dots, scores, row_max.item(), exps, total.item(), weights, weighted, weighted.sum(0)
    )


def attention_steps(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    position: int | None = None,
    labels: list[str] | None = None,
    dims: int | None = None,
) -> tuple[list[str], RowArithmetic]:
    """Steps 4–6 of the walkthrough for one query: the printed lines and the numbers behind them.

    Args:
        q: the query (d,).
        keys: one key per position (n, d).
        values: one value per position (n, d_v).
        position: the query's position; keys after it are masked (default: the last, so none are).
        labels: how to name each position (default: its index).
        dims: entries of each value vector to print (default: all).
    """
    a = row_arithmetic(q, keys, values, position)
    d, n = q.numel(), keys.size(0)
    labels = labels or [""] * n
    name = [f"{j:>{len(str(n - 1))}} {labels[j]}".rstrip() for j in range(n)]
    w = max(len(s) for s in name)
    seen = range(a.position + 1)
    masked = _masked_line(name, a.position)
    lines = [f"4. Scores: q · k_j / √{d} for each position j ≤ {a.position} (√{d} = {num(math.sqrt(d))})"]
    for j in seen:
        terms = " + ".join(
            f"{_signed(q[t].item())}×{_signed(keys[j, t].item())}" for t in range(min(SHOWN_TERMS, d))
        )
        more = f" + … ({d} terms)" if d > SHOWN_TERMS else ""
        lines.append(
            f"   {name[j]:<{w}}  {terms}{more} = {num(a.dots[j].item())}"
            f"  → / √{d} = {num(a.scores[j].item())}"
        )
    lines += [masked] if masked else []
    lines.append(
        f"5. Softmax: subtract the largest score ({num(a.row_max)}), exponentiate, divide by the sum"
    )
    lines.append(f"   {'j':<{w}}  {'score − max':>12} {'exp':>9} {'weight':>9}")
    weights = a.weights.tolist()
    for j in seen:
        shifted, e = a.scores[j].item() - a.row_max, a.exps[j].item()
        lines.append(f"   {name[j]:<{w}}  {num(shifted):>12} {num(e):>9} {num(weights[j]):>9}")
    lines.append(f"   sum of exps = {num(a.total)}; each weight = exp / {num(a.total)}")
    lines.append("6. Output: the values, each scaled by its weight, summed")
    for j in seen:
        scaled = f"{num(weights[j])} × {vec(values[j], dims)} = {vec(a.weighted[j], dims)}"
        lines.append(f"   {name[j]:<{w}}  {scaled}")
    lines.append(f"   output = {vec(a.output, dims)}")
    return lines, a


def walkthrough(
    model: GPT, tokenizer: CharTokenizer, trace: Trace, layer: int, head: int, token: int, dims: int | None
) -> str:
    """All seven steps for `token` of the traced prompt, through `layer`, `head`."""
    cfg = model.config
    hs = cfg.head_size
    chars = [tokenizer.chars[i] for i in trace.ids]
    labels = [quoted(c) for c in chars]
    lt = trace.layers[layer]
    dims = hs if dims is None else dims
    wide = "" if dims >= cfg.n_embd else f"; vectors show their first {dims} entries"
    lines = [
        f"Following {labels[token]} (position {token} of {len(chars)}) through layer {layer}, head {head}.",
        f"n_embd {cfg.n_embd}, n_head {cfg.n_head}, d_head {hs}{wide}. Numbers are the model's own.",
        "",
        "1. Embedding: the residual stream starts as token embedding + position embedding",
        f"   wte[{labels[token]}] = {vec(trace.tok_emb[token], dims)}",
        f"   wpe[{token}] = {vec(trace.pos_emb[token], dims)}",
        f"   x = wte + wpe = {vec(trace.tok_emb[token] + trace.pos_emb[token], dims)}",
    ]
    x = lt.resid[token]
    if layer > 0:
        earlier = "layer 0" if layer == 1 else f"layers 0…{layer - 1}"
        outputs = "attention and MLP outputs" if cfg.mlp else "attention outputs (no MLPs)"
        lines.append(f"   entering layer {layer}, after {earlier} added {outputs}:")
        lines.append(f"   x = {vec(x, dims)}")
    mean, var = x.mean().item(), x.var(unbiased=False).item()
    with_bias = " and c_proj's bias" if cfg.bias else ""
    lines += [
        f"2. Layer norm ln_1 of layer {layer}: (x − mean) / √(var + 1e-5) · weight"
        + (" + bias" if cfg.bias else ""),
        f"   mean = {num(mean)}, var = {num(var)}",
        f"   ln_1(x) = {vec(lt.ln_1[token], dims)}",
        f"3. Query, key and value of head {head}: its {hs} columns of c_attn's q, k and v parts",
        f"   q = {vec(lt.q[head, token], dims)}",
        f"   k = {vec(lt.k[head, token], dims)}",
        f"   v = {vec(lt.v[head, token], dims)}",
    ]
    steps, _ = attention_steps(lt.q[head, token], lt.k[head], lt.v[head], token, labels, dims)
    lines += steps
    contrib = lt.contrib[head, token]
    lines += [
        f"   through head {head}'s columns of c_proj, it adds {vec(contrib, dims)} to the residual stream",
        f"   all {cfg.n_head} heads{with_bias} together add {vec(lt.out[token], dims)}",
        f"7. After all {cfg.n_layer} layers, ln_f and the LM head: the likeliest next characters",
        "   " + "  ".join(f"{quoted(c)} {p:.4f}" for c, p in _top(trace.logits[token], tokenizer.chars)),
    ]
    return "\n".join(lines)


def walk_focus(
    config: GPTConfig,
    ids: list[int],
    layer: int = 0,
    head: int = 0,
    token: int | None = None,
    dims: int | None = None,
    backward: bool = False,
) -> tuple[int, int, int]:
    """The (layer, head, token) a walkthrough follows, each checked (token None: the last position, or
    with backward, the last whose next character the prompt holds), and dims checked."""
    if backward and len(ids) < 2:
        raise UserError(
            "--backward follows the loss of predicting the next character, and a prompt of one character "
            "(an empty prompt is a newline) has none to predict; give a prompt of at least 2 characters"
        )
    if backward and token is None:
        token = len(ids) - 2
    given = token
    layer, head, token = focus(config, ids, layer, head, token)
    if dims is not None and dims < 1:
        raise UserError(f"--dims {dims} is below 1; use 1 or more")
    if backward and token >= len(ids) - 1:
        raise UserError(
            f"--backward follows the loss of predicting the character after --token {given}, and the prompt "
            f"has none after it; use a --token below {len(ids) - 1} (or a longer prompt)"
        )
    return layer, head, token


def backward_text(
    model: GPT,
    tokenizer: CharTokenizer,
    ids: list[int],
    layer: int,
    head: int,
    token: int,
    dims: int | None = None,
    lr: float = STEP_LR,
) -> tuple[str, RowBackward]:
    """The walkthrough backwards (`explain --backward`) for the loss of predicting the character after
    token, with one gradient step of size lr: its text, and its gradients."""
    check_lr(lr)
    labels = [quoted(tokenizer.chars[i]) for i in ids[: token + 1]]
    rows = row_backward(model, ids, layer, head, token)
    steps = backward_steps(rows, labels, dims, tokenizer.chars)
    steps += step_lines(model, ids, layer, head, token, lr, labels)
    return "\n".join(steps), rows


def walkthrough_of_vectors(
    q: list[float], keys: list[list[float]], values: list[list[float]]
) -> tuple[str, RowArithmetic]:
    """Steps 4–6 on vectors given by hand: one query, keys and values (no model needed); the text, and
    every number of it."""
    if any(len(k) != len(q) for k in keys):
        raise UserError(f"every key needs as many numbers as the query ({len(q)})")
    if len(values) != len(keys) or len({len(v) for v in values}) != 1:
        raise UserError("give one value per key, each with the same number of entries")
    q_, keys_, values_ = torch.tensor(q), torch.tensor(keys), torch.tensor(values)  # float32, as a model's
    if not all(t.isfinite().all() for t in (q_, keys_, values_)):
        raise UserError(
            "--q, --keys and --values take finite numbers within float32's range (up to about 3.4e38); "
            "leave out inf and nan"
        )
    if not (keys_ @ q_).isfinite().all():
        raise UserError("the scores q·k overflow float32 (they come to infinity); use smaller numbers")
    lines, row = attention_steps(q_, keys_, values_)
    return "\n".join(lines), row


def _masked_line(name: list[str], position: int) -> str | None:
    """One line for the positions after the query, or None when there are none."""
    later = name[position + 1 :]
    if not later:
        return None
    which = later[0].strip() if len(later) == 1 else f"{later[0].strip()} … {later[-1].strip()}"
    return f"   {which}: later, so masked: score −∞, exp(−∞) = 0, weight 0"


def _signed(x: float) -> str:
    return num(x) if x >= 0 else f"({num(x)})"


def _top(logits: torch.Tensor, vocab: list[str], k: int = 5) -> list[tuple[str, float]]:
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(min(k, len(vocab)))
    return [(vocab[i], p) for p, i in zip(top.values.tolist(), top.indices.tolist(), strict=True)]
