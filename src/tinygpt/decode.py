"""One new position through a GPT and its KV cache, in as few calls as the arithmetic needs.

tinygpt.model's forward pass is the definition: any number of positions, (B, T, C) shapes,
through the modules, where the explain tools and ablation hook in. For one new position a
row (a cached generation step at batch 1) the arithmetic is small and the cost is the calls:
about 500 kernels, views and module calls at nanoGPT's CPU-recipe size, microseconds each
(BENCHMARKS.md). `step` does the same arithmetic on the same parameters and the same cache
with rows (B, C) instead of (B, 1, C), no module calls, each residual added inside its matmul
(addmm), and q, k, v cut from the projection without a permute. tests/test_generate.py holds
it to the model's forward. tinygpt.generate takes it only where `usable` says nothing would
be missed: nothing hooked, no explicit attention, eval mode, float32, no autocast.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinygpt.kv_cache import KVCache
from tinygpt.model import GPT, Block, LayerNorm, gelu


def usable(model: GPT, device: torch.device) -> bool:
    """Whether `step` computes what model(idx, cache=…) computes: the model as it is, unwatched."""
    if model.training or torch.is_autocast_enabled(device.type):
        return False
    if any(block.attn.explicit for block in model.h):
        return False
    if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):  # ablation, trace
        return False
    return all(p.dtype == torch.float32 for p in model.parameters())


@torch.inference_mode()
def step(model: GPT, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Logits (B, vocab) for the next position after ids (B,), the last characters; ids take position
    cache.length, and their keys and values go into the cache."""
    x = model.wte.weight[ids] + model.wpe.weight[cache.length]  # (B, C)
    for block in model.h:
        x = _attention(block, x, cache)
        x = _add_linear(x, gelu(_linear(_norm(block.ln_2, x), block.mlp.c_fc).unsqueeze(1)), block.mlp.c_proj)
    cache.advance(1)
    return F.linear(_norm(model.ln_f, x), model.lm_head.weight)  # (B, vocab)


def _attention(block: Block, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """x (B, C) plus what the block's attention adds for this position."""
    attn = block.attn
    B, C = x.shape
    qkv = _linear(_norm(block.ln_1, x), attn.c_attn)  # (B, 3·C)
    q, k, v = qkv.view(B, 3, attn.c_attn.n_head, 1, -1).unbind(1)  # 3 × (B, nh, 1, hs)
    k, v = cache.store(attn.layer_index, k, v)  # (B, nh, length + 1, hs)
    y = F.scaled_dot_product_attention(q, k, v)  # (B, nh, 1, hs): one query sees every key
    return _add_linear(x, y.reshape(B, C), attn.c_proj)


def _norm(norm: LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, norm.weight.shape, norm.weight, norm.bias, eps=1e-5)


def _linear(x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    return F.linear(x, linear.weight, linear.bias)


def _add_linear(x: torch.Tensor, h: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    """x (B, C) + linear(h) for h (B, in) or (B, 1, in): the residual added inside the matmul."""
    out = torch.addmm(x, h.view(x.size(0), -1), linear.weight.t())  # (B, C)
    return out if linear.bias is None else out.add_(linear.bias)
