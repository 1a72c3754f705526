"""The backward pass, step by step: how the loss at one position reaches one head's query, keys and values.

For the loss L of predicting the character after position i, through layer l, head h
(n keys j ≤ i, head size d), in float64 so that every number can be checked exactly:

    1. dL/dlogits   = softmax(logits_i) − onehot(next character)
    2. g = dL/dy_i    the gradient arriving at the head's output (through c_proj and every
                      later layer: taken from autograd, the one step not written out here)
    3. dL/dw_j      = g · v_j                       (y_i = Σ_j w_j v_j)
       dL/dv_j      = w_j · g                       (through this query's row only)
    4. dL/ds_j      = w_j · (dL/dw_j − Σ_k w_k · dL/dw_k)     (through the softmax)
    5. dL/d(q·k_j)  = dL/ds_j / √d                  (through the scale)
    6. dL/dq_i      = Σ_j dL/d(q·k_j) · k_j,   dL/dk_j = dL/d(q·k_j) · q_i
    7. one plain gradient step of size lr on this head's query, key and value weights, from
       this loss alone, and the weights query i gives the keys after it

Keys and values are used by every later query too; steps 3 and 6 give their gradient
through query i's row, which is all of this loss's gradient for q_i, the scores and the
weights of row i.
"""

import copy
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tinygpt.errors import UserError
from tinygpt.explain.ablate import rest_of_model
from tinygpt.explain.glyphs import num, quoted, vec
from tinygpt.generation.kv_cache import KVCache
from tinygpt.hooks import caught
from tinygpt.model import GPT


@dataclass
class RowBackward:
    """Every gradient of the walkthrough backwards, for query i of one head (n = i + 1 keys)."""

    target: int  # the character after position i
    loss: float
    dlogits: torch.Tensor  # (vocab,)
    g: torch.Tensor  # (d,) dL/dy_i
    q: torch.Tensor  # (d,)
    k: torch.Tensor  # (n, d)
    v: torch.Tensor  # (n, d)
    w: torch.Tensor  # (n,) softmax weights of row i
    dw: torch.Tensor  # (n,)
    dv: torch.Tensor  # (n, d) through row i
    ds: torch.Tensor  # (n,) dL/d score
    ddot: torch.Tensor  # (n,) dL/d(q·k_j)
    dq: torch.Tensor  # (d,)
    dk: torch.Tensor  # (n, d) through row i


def row_backward(model: GPT, ids: list[int], layer: int, head: int, i: int) -> RowBackward:
    """The gradients of the loss at position i (predicting ids[i + 1]) for one head, in float64."""
    exact = copy.deepcopy(model).double().eval()
    idx = torch.tensor([ids[: i + 1]], device=exact.wte.weight.device)  # later characters do not matter
    logits, found = exact.run_with_cache(idx, names=[f"blocks.{layer}.attn.*"])
    at = {site: found[f"blocks.{layer}.attn.{site}"] for site in ("q", "k", "v", "pattern", "z")}
    heads = at["z"]  # (1, nh, n, d): every head's output
    heads.retain_grad()
    target = ids[i + 1]
    loss = F.cross_entropy(logits[0, i], torch.tensor(target, device=logits.device))
    loss.backward()
    q, k, v = at["q"][0, head, i].detach(), at["k"][0, head].detach(), at["v"][0, head].detach()
    w = at["pattern"][0, head, i].detach()  # (n,)
    g = heads.grad[0, head, i]  # (d,)
    dw = v @ g  # (n,)
    ds = w * (dw - (w * dw).sum())
    ddot = ds / math.sqrt(q.numel())
    dlogits = torch.softmax(logits[0, i].detach(), dim=-1) - F.one_hot(torch.tensor(target), logits.size(-1))
    return RowBackward(
        target,
        loss.item(),
        dlogits,
        g,
        q,
        k,
        v,
        w,
        dw,
        w.unsqueeze(1) * g,
        ds,
        ddot,
        ddot @ k,
        ddot.unsqueeze(1) * q,
    )


def head_output_gradients(model: GPT, ids: list[int], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Step 2 for every position at once: g[i, l, h] = dL_i/dy_i of head h of layer l, where L_i is the
    loss of predicting ids[i + 1]; in `dtype` (float64 unless kept coarser, as step_effects),
    (T − 1, n_layer, n_head, head_size).

    y_i reaches L_i only through position i's own stream: earlier positions' keys and values do not
    depend on it, and later positions do not reach L_i. So each position runs alone, its earlier
    keys and values given (a KV cache from one pass over the prompt, held fixed), and one backward
    pass from L_i gives g for every layer and head. The page works steps 3–6 out itself from these.
    """
    exact = copy.deepcopy(model).to(dtype).eval()
    device = exact.wte.weight.device
    prompt = torch.tensor([ids], device=device)  # (1, T)
    layers = range(exact.config.n_layer)
    with torch.no_grad():
        _, full = exact.run_with_cache(prompt, names=["blocks.*.attn.k", "blocks.*.attn.v"])
    keys_values = [(full[f"blocks.{layer}.attn.k"], full[f"blocks.{layer}.attn.v"]) for layer in layers]
    rows = []
    for i in one_thread(range(len(ids) - 1)):
        cache = fixed_cache(exact, keys_values, i)
        logits, found = exact.run_with_cache(prompt[:, i : i + 1], names=["blocks.*.attn.z"], cache=cache)
        loss = F.cross_entropy(logits[0, 0], prompt[0, i + 1])  # logits (1, 1, vocab)
        grads = torch.autograd.grad(
            loss, [found[f"blocks.{layer}.attn.z"] for layer in layers]
        )  # (1, nh, 1, hs)
        rows.append(torch.stack([g[0, :, 0] for g in grads]))  # (n_layer, nh, hs)
    c = exact.config
    if not rows:
        return torch.zeros(0, c.n_layer, c.n_head, c.head_size, dtype=torch.float64)
    return torch.stack(rows).cpu()


def one_thread(items: range) -> Iterator[int]:
    """The items, with torch on one thread while each is worked on: a one-character pass is too small to
    split, and on a busy machine more threads only wait on each other (BENCHMARKS.md, the page's section)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield from items
    finally:
        torch.set_num_threads(before)


def fixed_cache(model: GPT, keys_values: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> KVCache:
    """A KV cache holding the first `length` positions of each layer's keys and values (1, nh, T, hs)."""
    cache = KVCache(model.config, batch_size=1)
    for layer, (k, v) in enumerate(keys_values):
        cache.store(layer, k[:, :, :length], v[:, :, :length])
    cache.advance(length)
    return cache


STEP_LR = 0.1  # the size of the step that step 7 shows, unless told (explain --lr)


def check_lr(lr: float) -> None:
    """--lr must be a positive number: step 7 steps down the gradient."""
    if not (math.isfinite(lr) and lr > 0):
        raise UserError(f"--lr {lr} is not a positive number; use e.g. {STEP_LR}")


@dataclass
class StepEffect:
    """Step 7 for query i of one head: one plain gradient step of size lr on the head's q, k, v rows
    of c_attn (weight and bias), from the loss at position i alone, and what it changes."""

    layer: int
    head: int
    i: int
    before: torch.Tensor  # (i + 1,) the weights query i gives keys 0 … i
    after: torch.Tensor  # (i + 1,) the same after the step
    loss: float
    loss_after: float


def step_effects(
    model: GPT,
    ids: list[int],
    lr: float,
    positions: Iterable[int],
    heads: list[tuple[int, int]],
    dtype: torch.dtype = torch.float64,
) -> Iterator[StepEffect]:
    """Step 7 for each position i in `positions` and each (layer, head) in `heads`, in that order.

    One copy of the model in `dtype` serves every case: float64, unless the numbers are kept coarser (a
    page that carries them in float16 computes them in float32, in half the time). Attention is causal,
    so one forward pass over the prompt gives every position's loss and activations as a pass over the
    characters up to it would; the loss at i and its gradient do not depend on which head then steps,
    so per position one backward pass gives every head's gradient.
    Then per layer every asked head's rows step at once (a head's q, k, v rows make only that head's
    pattern and output), and one batch runs from that layer on (the layers before it are unchanged:
    their output is kept from the first pass), copy b with only head b's output stepped, every other
    head's as before; the rows are then put back as they were.
    """
    exact = copy.deepcopy(model).to(dtype).eval()
    stepped = copy.deepcopy(exact)  # stepped and put back: the backward passes read exact's weights
    device = exact.wte.weight.device
    params, twins = attention_rows(exact, heads), attention_rows(stepped, heads)
    prompt = torch.tensor([ids], device=device)  # (1, T)
    names = ["blocks.*.attn.pattern", "blocks.*.attn.z", "blocks.*.resid_pre"]
    logits, whole = exact.run_with_cache(prompt, names=names)
    losses = F.cross_entropy(logits[0, :-1], prompt[0, 1:], reduction="none")  # (T − 1,)
    for i in positions:
        target, loss = prompt[0, i + 1], losses[i]
        grads = dict(zip(twins, torch.autograd.grad(loss, params, retain_graph=True), strict=True))
        found = {name: up_to(name, t, i + 1) for name, t in whole.items()}  # later characters do not matter
        after = {}
        for layer in dict.fromkeys(layer for layer, _ in heads):
            mine = [head for at, head in heads if at == layer]
            with torch.no_grad():
                weights, lost = layer_stepped(stepped, found, grads, layer, mine, lr, target)
            after |= {(layer, head): (weights[b, head, -1], lost[b]) for b, head in enumerate(mine)}  # row i
        for layer, head in heads:
            weights, loss_after = after[layer, head]
            before = found[f"blocks.{layer}.attn.pattern"][0, head, i].detach().cpu()
            yield StepEffect(layer, head, i, before, weights.cpu(), loss.item(), loss_after.item())


def attention_rows(model: GPT, heads: list[tuple[int, int]]) -> list[torch.Tensor]:
    """c_attn's weight (3C, C) and bias (3C,) of each layer of heads: what step 7 steps."""
    layers = dict.fromkeys(layer for layer, _ in heads)
    return [p for layer in layers for p in model.h[layer].attn.c_attn.parameters()]


def up_to(name: str, t: torch.Tensor, n: int) -> torch.Tensor:
    """Activation t of a pass over the prompt as a pass over its first n characters gives it: the first n
    positions (a pattern's first n rows and columns)."""
    if name.endswith("pattern"):
        return t[:, :, :n, :n]  # (1, nh, n, n)
    return t[:, :n] if name.endswith("resid_pre") else t[:, :, :n]  # (1, n, C) or (1, nh, n, hs)


def layer_stepped(
    model: GPT, found: dict, grads: dict, layer: int, heads: list[int], lr: float, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The heads of one layer each stepped alone, as one batch of len(heads) = k copies of the position
    (n = i + 1 characters) from the first pass `found`: every copy's pattern (k, nh, n, n) with the
    heads' rows stepped ((k, nh, 1, n), its last row, in the final layer, which computes the last position
    alone), and copy b's loss at the last position with head b's output alone stepped (k,)."""
    c_attn = model.h[layer].attn.c_attn
    rows = torch.cat([head_rows(model, head) for head in heads])
    kept = [(p, p[rows].clone()) for p in c_attn.parameters()]
    for p, _ in kept:
        p[rows] -= lr * grads[p][rows]
    z_name, pattern, stepped = f"blocks.{layer}.attn.z", f"blocks.{layer}.attn.pattern", {}
    unchanged = found[z_name].detach()  # (1, nh, n, hs): every head's output before the step
    copies, chosen = torch.arange(len(heads)), torch.tensor(heads)

    def one_head_stepped(z: torch.Tensor, name: str) -> torch.Tensor:
        # (k, nh, n, hs); in the final layer, which computes the last position alone, (k, nh, 1, hs)
        mixed = unchanged[:, :, -z.size(2) :].expand_as(z).clone()
        mixed[copies, chosen] = z[copies, chosen]
        return mixed

    entering = found[f"blocks.{layer}.resid_pre"].detach()  # (1, n, C)
    with model.hooks({pattern: caught(stepped), z_name: one_head_stepped}):
        logits = rest_of_model(model, entering.expand(len(heads), -1, -1), layer, last=1)  # (k, 1, vocab)
    for p, rows_before in kept:
        p[rows] = rows_before
    losses = F.cross_entropy(logits[:, -1], target.expand(len(heads)), reduction="none")  # (k,)
    return stepped[pattern], losses


def head_rows(model: GPT, head: int) -> torch.Tensor:
    """The rows of c_attn (its weight's and its bias's) that make one head's query, key and value."""
    c, d = model.config.n_embd, model.config.head_size
    return torch.cat([torch.arange(part * c + head * d, part * c + (head + 1) * d) for part in range(3)])


def step_effect(model: GPT, ids: list[int], layer: int, head: int, i: int, lr: float) -> StepEffect:
    """Step 7 for query i of one head, as `explain --backward` prints it."""
    return next(step_effects(model, ids, lr, [i], [(layer, head)]))


def backward_steps(rb: RowBackward, labels: list[str], dims: int | None, vocab: list[str]) -> list[str]:
    """The lines of the backward walkthrough (steps 1–6) for one row's gradients."""
    n, d = rb.k.size(0), rb.q.numel()
    name = [f"{j:>{len(str(n - 1))}} {labels[j]}" for j in range(n)]
    top = rb.dlogits.abs().topk(min(5, rb.dlogits.numel()))
    lines = [
        f"Backwards: the loss of predicting {quoted(vocab[rb.target])} after position {n - 1}: "
        f"L = −ln p = {num(rb.loss)}",
        "1. dL/dlogits = softmax − onehot: p − 1 for the target, p for every other character (largest shown)",
        "   " + "  ".join(f"{quoted(vocab[j])} {rb.dlogits[j].item():+.4f}" for j in top.indices.tolist()),
        "2. the gradient arriving at this head's output, through c_proj and every later layer:",
        f"   g = dL/dy = {vec(rb.g, dims)}",
        "3. through the weighted sum y = Σ_j w_j·v_j: dL/dw_j = g · v_j, and dL/dv_j = w_j · g",
    ]
    lines += [
        f"   {name[j]}  dL/dw = {num(rb.dw[j].item())}   dL/dv = {vec(rb.dv[j], dims)}" for j in range(n)
    ]
    mean = (rb.w * rb.dw).sum().item()
    lines.append(
        f"4. through the softmax: dL/ds_j = w_j · (dL/dw_j − Σ_k w_k·dL/dw_k), Σ_k w_k·dL/dw_k = {num(mean)}"
    )
    for j in range(n):
        w, dw, ds = (num(x[j].item()) for x in (rb.w, rb.dw, rb.ds))
        lines.append(f"   {name[j]}  {w} × ({dw} − {num(mean)}) = {ds}")
    lines.append(f"5. through the scale 1/√{d}: dL/d(q·k_j) = dL/ds_j / {num(math.sqrt(d))}")
    lines += [f"   {name[j]}  {num(rb.ddot[j].item())}" for j in range(n)]
    lines.append("6. to the query and the keys: dL/dq = Σ_j dL/d(q·k_j)·k_j, dL/dk_j = dL/d(q·k_j)·q")
    lines.append(f"   dL/dq = {vec(rb.dq, dims)}")
    lines += [f"   {name[j]}  dL/dk = {vec(rb.dk[j], dims)}" for j in range(n)]
    return lines


def step_lines(
    model: GPT, ids: list[int], layer: int, head: int, i: int, lr: float, labels: list[str]
) -> list[str]:
    """Step 7: what one gradient step on this head's q, k, v weights does to query i's attention and loss."""
    step = step_effect(model, ids, layer, head, i, lr)
    lines = [f"7. one plain step of size {lr:g} on head {head}'s q, k and v weights, from this loss alone:"]
    before, after = step.before.tolist(), step.after.tolist()
    width = len(str(i))
    lines += [f"   {j:>{width}} {labels[j]}  weight {num(before[j])} → {num(after[j])}" for j in range(i + 1)]
    lines.append(f"   loss {num(step.loss)} → {num(step.loss_after)}")
    return lines
