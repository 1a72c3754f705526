"""One new position through a GPT and its KV cache, in as few calls as the arithmetic needs.

tinygpt.model's forward pass is the definition: any number of positions, (B, T, C) shapes,
through the modules and their named hook points, where the explain tools and ablation hook in.
For one new position a row (a cached generation step at batch 1) the arithmetic is small and
the cost is elsewhere (BENCHMARKS.md): at nanoGPT's CPU-recipe size the calls, microseconds each; at 6 × 384
reading the 43 MB of weights, once a character. A `Decoder` is made once a generation and
does the same arithmetic on the same values: rows (B, C) instead of (B, 1, C), no module
calls or attribute look-ups inside the step, each residual added inside its matmul (addmm),
q, k, v cut from the projection without a permute, and every block matrix copied once into
the (in, out) layout, which a row times a matrix reads fastest on CPU (the 24 products of a
6 × 384 step 1.4× faster than from nn.Linear's (out, in), benchmarks/decode_limits.py).
On a CPU the GELU takes two kernels, its constants folded into the MLP's copies (`Layer`):
generation at cpu.yaml's 4 × 128 1.07-1.13× faster than with the GELU's own four (BENCHMARKS.md).
tests/generation/test_generate.py holds it to the model's forward.

On more than one thread, a model whose block matrices are too big for a CPU's caches (`SPLIT_FROM`)
has each product cut by hand: the matrix's rows into one run a thread, a batch of products that
torch runs one a thread, the pieces summed. MKL's own threaded product of one row by a matrix
gains nothing from a second thread on AMD's EPYCs (BENCHMARKS.md, issue 39 item 3), where the cut
makes a 6 × 384 step about 1.4× faster on two threads than on one; a small model loses by it (the
pieces cost more calls than its products take), so below SPLIT_FROM the products are whole.
tinygpt.generation.sampling takes it only where `usable` says nothing would be missed: nothing hooked,
eval mode, float32, no autocast. (torch's own module hooks, which tinygpt's tools do not use, are not
seen here: read or replace activations through the named hook points.)
"""

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from tinygpt.generation.kv_cache import KVCache
from tinygpt.model import GPT, Block, LayerNorm


def usable(model: GPT, device: torch.device) -> bool:
    """Whether a Decoder computes what model(idx, cache=…) computes: the model as it is, unwatched."""
    if model.training or torch.is_autocast_enabled(device.type):
        return False
    if model.hook_points.active:  # a tool reads or replaces an activation (tinygpt.hooks)
        return False
    return all(p.dtype == torch.float32 for p in model.parameters())


class Norm(NamedTuple):
    """A layer norm's gain and bias (C,), read without a module look-up."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    @classmethod
    def of(cls, norm: LayerNorm) -> "Norm":
        return cls(norm.weight, norm.bias)


class Matrix(NamedTuple):
    """A linear layer for rows: its weight as (in, out), contiguous, and its bias (out,) or None."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    @classmethod
    def of(cls, linear: torch.nn.Linear, scale: float = 1.0, bias_scale: float = 1.0) -> "Matrix":
        """The copy, its weight times scale and its bias times bias_scale (the GELU's fold: Layer.of)."""
        weight = linear.weight.detach()  # (out, in)
        weight = (weight if scale == 1.0 else weight * scale).t().contiguous()  # (in, out)
        bias = linear.bias if linear.bias is None or bias_scale == 1.0 else linear.bias.detach() * bias_scale
        return cls(weight, bias)


FOLD = -math.sqrt(0.5)  # −1/√2: the GELU's constants, folded into the MLP's copies (Layer)


class Layer(NamedTuple):
    """What one block's step reads, in the order it reads it (attention-only: no ln_2, fc, fc_proj).

    Folded (on a CPU), fc and fc_proj are the MLP's matrices scaled by −1/√2 so that the GELU takes two
    kernels (`folded_gelu`): with z = −a/√2 for c_fc's output a, GELU(a) = a·Φ(a) = a·erfc(−a/√2)/2 =
    −z·erfc(z)/√2, so fc gives z (weight and bias scaled) and fc_proj takes z·erfc(z) (its weight
    scaled, its bias not). Elsewhere they are as they are, for F.gelu (one kernel on a GPU).
    """

    index: int
    n_head: int
    ln_1: Norm
    qkv: Matrix  # (C, 3·C)
    proj: Matrix  # (C, C)
    ln_2: Norm | None
    fc: Matrix | None  # (C, 4·C)
    fc_proj: Matrix | None  # (4·C, C)

    @classmethod
    def of(cls, block: Block, folded: bool) -> "Layer":
        attn = block.attn
        qkv, proj, ln_1 = Matrix.of(attn.c_attn), Matrix.of(attn.c_proj), Norm.of(block.ln_1)
        head = (attn.layer_index, attn.c_attn.n_head, ln_1, qkv, proj)
        if not block.has_mlp:
            return cls(*head, None, None, None)
        scale = FOLD if folded else 1.0
        fc = Matrix.of(block.mlp.c_fc, scale, scale)  # folded: gives z = −a/√2
        fc_proj = Matrix.of(block.mlp.c_proj, scale)  # folded: takes z·erfc(z) = −√2·GELU(a)
        return cls(*head, Norm.of(block.ln_2), fc, fc_proj)


def folded_gelu(z: torch.Tensor) -> torch.Tensor:
    """−√2·GELU(a) from z = −a/√2: z·erfc(z), in two kernels (Layer says why)."""
    return torch.special.erfc(z).mul_(z)


SPLIT_FROM = 16 * 2**20  # bytes of block matrices from which products are cut over the threads (above)


class Decoder:
    """A model's weights laid out for one new position a step (a copy of the block matrices, made
    once), and that step. Make it after the weights last change: it does not follow them."""

    def __init__(self, model: GPT, split_from: int = SPLIT_FROM):
        self.wte, self.wpe = model.wte.weight, model.wpe.weight  # (vocab, C), (block_size, C)
        on_cpu = self.wte.device.type == "cpu"
        self.layers = [Layer.of(block, folded=on_cpu) for block in model.h]
        self.activation = folded_gelu if on_cpu else F.gelu  # what fc's output goes through (Layer)
        self.ln_f, self.head = Norm.of(model.ln_f), model.lm_head.weight  # head: (vocab, C)
        matrix_bytes = sum(p.nbytes for p in model.h.parameters() if p.dim() == 2)  # the blocks' matrices
        self.split = on_cpu and matrix_bytes >= split_from

    @torch.inference_mode()
    def step(self, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits (B, vocab) for the next position after ids (B,), the last characters; ids take
        position cache.length, and their keys and values go into the cache."""
        x = self.wte[ids] + self.wpe[cache.length]  # (B, C)
        B, C = x.shape
        activation, parts = self.activation, self.parts(C)
        for index, n_head, ln_1, qkv, proj, ln_2, fc, fc_proj in self.layers:
            qkv_row = _matmul(_norm(ln_1, x), qkv, parts)  # (B, 3·C)
            q, k, v = qkv_row.view(B, 3, n_head, 1, -1).unbind(1)  # 3 × (B, nh, 1, hs)
            k, v = cache.store(index, k, v)  # (B, nh, length + 1, hs)
            y = F.scaled_dot_product_attention(q, k, v)  # (B, nh, 1, hs): one query sees every key
            x = _add_matmul(x, y.view(B, C), proj, parts)
            if fc is not None:
                x = _add_matmul(x, activation(_matmul(_norm(ln_2, x), fc, parts)), fc_proj, parts)
        cache.advance(1)
        return F.linear(_norm(self.ln_f, x), self.head)  # (B, vocab)

    def parts(self, C: int) -> int:
        """Into how many runs of rows each product is cut now: torch's threads, where the model is
        big enough and they divide the width C (so 4·C too), else 1 (whole)."""
        threads = torch.get_num_threads() if self.split else 1
        return threads if C % threads == 0 else 1


def _norm(norm: Norm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, norm.weight.shape, norm.weight, norm.bias, eps=1e-5)


def _matmul(x: torch.Tensor, m: Matrix, parts: int) -> torch.Tensor:
    """x (B, in) times the matrix, plus its bias: (B, out); cut into parts runs of rows if parts > 1."""
    if parts > 1:
        out = _cut_product(x, m.weight, parts)
        return out if m.bias is None else out.add_(m.bias)
    return torch.mm(x, m.weight) if m.bias is None else torch.addmm(m.bias, x, m.weight)


def _add_matmul(x: torch.Tensor, h: torch.Tensor, m: Matrix, parts: int) -> torch.Tensor:
    """x (B, out) + h (B, in) times the matrix: the residual added inside the matmul (after a cut one)."""
    out = _cut_product(h, m.weight, parts).add_(x) if parts > 1 else torch.addmm(x, h, m.weight)
    return out if m.bias is None else out.add_(m.bias)


def _cut_product(x: torch.Tensor, weight: torch.Tensor, parts: int) -> torch.Tensor:
    """x (B, in) times weight (in, out) as parts products of in/parts rows each, which torch.bmm
    runs one a thread, summed: (B, out). The cut is a view; nothing is copied."""
    B, n_in = x.shape
    runs = x.view(B, parts, -1).transpose(0, 1)  # (parts, B, in/parts)
    pieces = torch.bmm(runs, weight.view(parts, n_in // parts, -1))  # (parts, B, out)
    return pieces.sum(0)
