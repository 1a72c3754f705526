"""A decoder-only GPT, built from small readable modules.

Architecture and initialisation follow GPT-2 (Radford et al., 2019) so that a
checkpoint maps one-to-one onto GPT-2's parameters:

    idx ─► wte(idx) + wpe(positions) ─► dropout ─► h[0] … h[n_layer-1] ─► ln_f ─► lm_head ─► logits
    each block:  x = x + attn(ln_1(x))      (multi-head causal self-attention)
                 x = x + mlp(ln_2(x))       (n_embd → 4·n_embd → GELU → n_embd; absent with mlp=False)

The LM head shares its weight with the token embedding. The model knows nothing
of files, configs, command lines or generation loops (those are in
tinygpt.generate, which takes a model): it takes ids and returns (logits, loss).
Every activation a tool may read or replace passes a named hook point on its way (tinygpt.hooks,
which lists the names); with nothing attached the model runs its fast paths.

Dropout modules are called only while training: in eval mode they are the
identity, and during generation, where one position runs through every layer,
Python's cost per call is comparable to the arithmetic (BENCHMARKS.md).
"""

import itertools
import math
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinygpt.attention import attention_pattern, causal_mask
from tinygpt.hooks import Hook, HookPoints, caught


@dataclass
class GPTConfig:
    """The shape of a GPT. Everything else about a run lives in the run config."""

    vocab_size: int  # number of distinct characters
    block_size: int  # longest context the model can attend over
    n_layer: int  # transformer blocks
    n_head: int  # attention heads per block
    n_embd: int  # width of the residual stream
    dropout: float = 0.0  # dropout on the embeddings, residual branches and attention weights
    attention_dropout: bool = True  # False: none on the attention weights (torch's fused kernel trains)
    bias: bool = True  # biases in linear layers and layer norms, as in GPT-2
    mlp: bool = True  # an MLP in every block; False: attention-only blocks, as in the circuits papers

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


class Cache(Protocol):
    """What the forward pass asks of a KV cache: tinygpt.generation.kv_cache.KVCache is the one there is
    (the model takes it and imports none of generation)."""

    length: int  # positions stored: the position of the first new one

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep this step's keys and values (B, nh, T, hs); give back all so far (B, nh, length + T, hs)."""
        ...

    def advance(self, steps: int) -> None:
        """Called once every layer has stored this step's positions."""
        ...


class TokenEmbedding(nn.Module):
    """A learned vector per character: row i of the table is the embedding of id i."""

    def __init__(self, vocab_size: int, n_embd: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, n_embd))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return F.embedding(idx, self.weight)  # (B, T) -> (B, T, C)


class PositionEmbedding(nn.Module):
    """A learned vector per position 0 … block_size-1, added to the token embedding."""

    def __init__(self, block_size: int, n_embd: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(block_size, n_embd))

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        return self.weight[offset : offset + length]  # (T, C)


class LayerNorm(nn.Module):
    """Layer normalisation: (x - mean) / sqrt(var + 1e-5) · weight + bias, over the last axis.

    A module of our own, like every part of the model, so the formula stands here; the work is
    torch's fused kernel. The bias is absent when config.bias is False.
    """

    def __init__(self, n_embd: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_embd))
        self.bias = nn.Parameter(torch.empty(n_embd)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, eps=1e-5)


class QKVProjection(nn.Linear):
    """One linear map from the residual stream to queries, keys and values, split into heads.

    Kept as a single (3·C, C) matrix, as in GPT-2, so that one matmul computes all
    three; the output is cut into q, k and v and each into n_head heads.
    """

    def __init__(self, config: GPTConfig):
        super().__init__(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.n_head = config.n_head

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, C = x.size()
        qkv = F.linear(x, self.weight, self.bias)  # (B, T, 3·C)
        qkv = qkv.view(B, T, 3, self.n_head, C // self.n_head)  # (B, T, 3, nh, hs)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind()  # 3 × (B, nh, T, hs)
        return q, k, v


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: each position mixes the values of itself and earlier positions.

    Two paths compute the same thing: the fast path calls torch's fused
    scaled_dot_product_attention; the explicit path computes the weights with
    `tinygpt.attention.attention_pattern`, the formula written out. The explicit path runs
    when a hook watches the weights (`blocks.L.attn.pattern`), which the fused kernel never forms.
    """

    def __init__(self, config: GPTConfig, layer_index: int, hook_points: HookPoints):
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be divisible by n_head"
        self.c_attn = QKVProjection(config)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.dropout = config.dropout if config.attention_dropout else 0.0  # on the attention weights
        self.layer_index = layer_index
        self.hook_points = hook_points
        self.q, self.k, self.v, self.pattern, self.z = (
            f"blocks.{layer_index}.attn.{site}" for site in ("q", "k", "v", "pattern", "z")
        )

    def forward(self, x: torch.Tensor, cache: Cache | None = None, last: int | None = None) -> torch.Tensor:
        """What attention adds to the stream x (B, T, C): (B, T, C), or (B, last, C) for the last `last`
        positions alone (every position is still read as a key and a value)."""
        at = self.hook_points.at
        q, k, v = self.c_attn(x)  # 3 × (B, nh, T, hs)
        if last is not None:
            q = q[:, :, -last:]  # (B, nh, last, hs): only these positions ask
        q, k, v = at(self.q, q), at(self.k, k), at(self.v, v)
        if cache is not None:
            k, v = cache.store(self.layer_index, k, v)  # (B, nh, Tk, hs): earlier positions too
        dropout_p = self.dropout if self.training else 0.0
        if self.hook_points.watched(self.pattern):  # the plain formula, which forms the weights
            weights = at(self.pattern, attention_pattern(q, k))  # (B, nh, T, Tk)
            y = (F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights) @ v
        else:
            y = self._fused(q, k, v, dropout_p)  # (B, nh, T, hs)
        y = at(self.z, y)  # (B, nh, Tq, hs)
        merged = y.transpose(1, 2).flatten(2)  # (B, Tq, C): heads side by side
        out = self.c_proj(merged)  # (B, Tq, C)
        if self.training:  # dropout only while training (see the note at the top)
            out = self.resid_dropout(out)
        return out

    @staticmethod
    def _fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
        if q.dtype == torch.bfloat16 and q.device.type == "cpu":
            # torch's CPU attention kernels are slower in bfloat16 than in float32 (BENCHMARKS.md)
            with torch.autocast("cpu", enabled=False):
                return _sdpa(q.float(), k.float(), v.float(), dropout_p).to(q.dtype)
        return _sdpa(q, k, v, dropout_p)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
    """torch's fused attention for queries (B, nh, Tq, hs) that are the last Tq of Tk positions."""
    t_query, t_key = q.size(-2), k.size(-2)
    if t_query == t_key:  # the usual case: a full causal triangle
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    if t_query == 1:  # one new token against a cache: it sees every key
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    mask = causal_mask(t_query, t_key, device=q.device)  # a chunk of queries after a cache
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


class MLP(nn.Module):
    """The position-wise feed-forward network: n_embd → 4·n_embd → GELU → n_embd."""

    def __init__(self, config: GPTConfig, layer_index: int, hook_points: HookPoints):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.hook_points = hook_points
        self.pre, self.post = f"blocks.{layer_index}.mlp.pre", f"blocks.{layer_index}.mlp.post"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        at = self.hook_points.at
        neurons = at(self.post, gelu(at(self.pre, self.c_fc(x))))  # (B, T, 4·C)
        x = self.c_proj(neurons)  # (B, T, C)
        if self.training:  # dropout only while training (see the note at the top)
            x = self.dropout(x)
        return x


def gelu(x: torch.Tensor) -> torch.Tensor:
    """The exact GELU, x·Φ(x); GPT-2 used its tanh approximation, which is slower on CPU (BENCHMARKS.md).

    For float32 on a CPU, F.gelu calls oneDNN, which sets each call up afresh and runs it on all
    threads: for one position a row (a cached generation step) that costs more than the arithmetic
    on a busy machine. There the same function goes through torch's own kernels, which keep so
    small a tensor on one thread, instead of switching oneDNN off (a process-wide switch):
    x·Φ(x) = x·erfc(−x/√2)/2, in four kernels (torch.special.ndtr takes nine).
    """
    if x.size(-2) == 1:  # (B, 1, 4·C): one position a sequence
        return one_position_gelu(x.device)(x)
    return F.gelu(x)


def one_position_gelu(device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """The GELU for one position a row on device (see gelu): erfc_gelu on a CPU, else F.gelu."""
    return erfc_gelu if device.type == "cpu" else F.gelu


def erfc_gelu(x: torch.Tensor) -> torch.Tensor:
    """x·Φ(x) = x·erfc(−x/√2)/2, in torch's own kernels (see gelu)."""
    return torch.special.erfc(x * -math.sqrt(0.5)).mul_(x).mul_(0.5)


class Block(nn.Module):
    """A pre-norm transformer block: attention, then MLP (unless config.mlp is False), each added to
    the residual stream."""

    def __init__(self, config: GPTConfig, layer_index: int, hook_points: HookPoints):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config, layer_index, hook_points)
        if config.mlp:
            self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
            self.mlp = MLP(config, layer_index, hook_points)
        self.has_mlp = config.mlp
        self.hook_points = hook_points
        self.names = {site: f"blocks.{layer_index}.{site}" for site in BLOCK_POINTS}

    def forward(self, x: torch.Tensor, cache: Cache | None = None, last: int | None = None) -> torch.Tensor:
        """The stream leaving the block: (B, T, C), or with `last` its last positions alone (B, last, C),
        for a caller that reads nothing else (the other positions are read as keys and values only)."""
        at, name = self.hook_points.at, self.names
        x = at(name["resid_pre"], x)
        attended = at(name["attn_out"], self.attn(at(name["ln1"], self.ln_1(x)), cache, last))
        if last is not None:
            x = x[:, -last:]  # (B, last, C)
        return self.feed_forward(at(name["resid_mid"], x + attended))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's second half: the stream after attention x (B, T, C), the MLP's output added to it
        (without an MLP, x as it is)."""
        at, name = self.hook_points.at, self.names
        if not self.has_mlp:
            return at(name["resid_post"], x)
        return at(name["resid_post"], x + at(name["mlp_out"], self.mlp(at(name["ln2"], self.ln_2(x)))))


BLOCK_POINTS = ("resid_pre", "ln1", "attn_out", "resid_mid", "ln2", "mlp_out", "resid_post")


class GPT(nn.Module):
    """The whole model: embeddings → blocks → final layer norm → LM head tied to the embedding."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = TokenEmbedding(config.vocab_size, config.n_embd)
        self.wpe = PositionEmbedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.hook_points = HookPoints(config.n_layer, config.mlp)  # shared by every module: tinygpt.hooks
        self.h = nn.ModuleList(Block(config, i, self.hook_points) for i in range(config.n_layer))
        self.ln_f = LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: the same matrix reads and writes characters
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        """GPT-2's initialisation, every tensor once, here.

        | tensor                                   | init                              |
        |------------------------------------------|-----------------------------------|
        | wte, wpe, linear weights                 | normal(0, 0.02)                   |
        | attn.c_proj and mlp.c_proj weights       | normal(0, 0.02 / √(2·n_layer)):   |
        |   (each block writes into the residual   |   keeps the residual stream's     |
        |   stream twice through them)             |   variance from growing with depth|
        | biases                                   | 0                                 |
        | layer norm weights                       | 1                                 |
        | lm_head weight                           | tied to wte, not initialised again|
        """
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, module in self.named_modules():
            if isinstance(module, (TokenEmbedding, PositionEmbedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, nn.Linear) and module is not self.lm_head:
                std = residual_std if name.endswith("c_proj") else 0.02
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, LayerNorm):
                nn.init.ones_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        """Parameters, the tied LM head counted once (as the token embedding)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        cache: Cache | None = None,
        last_only: bool = False,
        stop_at_layer: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits for every position (or only the last), and the loss when targets are given.

        Args:
            idx: character ids (B, T), T ≤ block_size (counting what the cache holds).
            targets: the next character at each position (B, T), or None.
            cache: keys and values of earlier positions, extended in place.
            last_only: compute logits for the last position only (generation).
            stop_at_layer: run blocks 0 … stop_at_layer − 1 only and return the stream entering block
                stop_at_layer in place of the logits (TransformerLens's name): for a caller that reads
                an early hook point alone. Not with a cache or targets.

        Returns:
            (logits (B, T, vocab) or (B, 1, vocab), mean cross-entropy loss or None); with
            stop_at_layer, (the stream (B, T, C), None).
        """
        B, T = idx.size()
        offset = cache.length if cache is not None else 0
        if offset + T > self.config.block_size:
            raise ValueError(f"sequence of {offset + T} exceeds block_size {self.config.block_size}")
        if stop_at_layer is not None and (cache is not None or targets is not None):
            raise ValueError("stop_at_layer returns the stream: it takes neither a cache nor targets")
        at = self.hook_points.at
        x = at("embed", self.wte(idx)) + at("pos_embed", self.wpe(T, offset))  # (B, T, C)
        if self.training:  # dropout only while training (see the note at the top)
            x = self.drop(x)
        for block in itertools.islice(self.h, stop_at_layer):  # every block when None
            x = block(x, cache)
        if stop_at_layer is not None:
            return x, None
        if cache is not None:
            cache.advance(T)
        x = at("ln_final", self.ln_f(x))  # (B, T, C)
        if last_only:
            x = x[:, -1:, :]  # (B, 1, C)
        logits = self.lm_head(x)  # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
        return logits, loss

    def hooks(self, hooks: dict[str, Hook]) -> AbstractContextManager[None]:
        """Inside the block, each hook runs at the hook points its name matches (tinygpt.hooks):
        `with model.hooks({"blocks.0.attn.z": fn}): model(idx)`."""
        return self.hook_points.attached(hooks)

    def run_with_cache(
        self, idx: torch.Tensor, names: Iterable[str] = ("*",), **forward: object
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The logits of idx and the activations at every hook point matching `names` (patterns such
        as 'blocks.*.attn.pattern'), by name, as computed (not detached: under no_grad as the caller
        chooses). Extra keywords go to forward."""
        found: dict[str, torch.Tensor] = {}
        with self.hooks({name: caught(found) for name in self.hook_points.matching(names)}):
            logits, _ = self(idx, **forward)
        return logits, found

    def generate(self, *args: object, **kwargs: object) -> None:
        """nanoGPT's model.generate: here generation takes a model (the model imports no generation loop)."""
        raise AttributeError(
            "GPT.generate is tinygpt.generate(model, idx, max_new_tokens, temperature=1.0, top_k=None) "
            "here: generation takes a model (docs/usage.md, 'Generating from Python')"
        )


@torch.no_grad()
def attention_weights(model: GPT, ids: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's attention weights on ids (N, T), through the hook points: (N, nh, T, T) each."""
    model.eval()
    _, found = model.run_with_cache(ids, names=["blocks.*.attn.pattern"])
    return [found[f"blocks.{layer}.attn.pattern"].float() for layer in range(model.config.n_layer)]
