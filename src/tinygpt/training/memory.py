"""Will training fit? A check before any weight is allocated.

A config with a typo in a size (n_embd: 200000, batch_size: 100000) would
otherwise ask the allocator for terabytes and end in an out-of-memory crash,
or a machine that swaps for minutes first. Both figures below are lower
bounds, so the check refuses only what cannot work:

- per parameter, its float32 weight, its gradient and AdamW's two moment
  estimates: 16 bytes;
- per token of a micro-batch, what a training step must hold at once: the
  values each block keeps for the backward (its two layer norms' inputs and
  outputs, q, k and v, the attention output, the MLP's hidden layer before and
  after GELU: 16·C values), ln_f's input and output (2·C), in the precision the
  step computes in (4 bytes in float32, 2 under bfloat16 or float16 autocast);
  the loss's log-softmax over the vocabulary and, beside it, the logits in the
  forward or their gradient in the backward (2 × vocab_size float32 values);
  and the input and target ids (two int64).

test_memory.py holds the bound below a real step's measured peak, and close
enough to it that a batch twice too large is refused.
"""

import torch

from tinygpt.device import GiB, free_memory
from tinygpt.errors import UserError
from tinygpt.model import GPTConfig

TRAINING_BYTES_PER_PARAMETER = 16  # weight, gradient, AdamW's exp_avg and exp_avg_sq, all float32
KEPT_PER_BLOCK = 16  # × n_embd values per token: ln_1 in and out, q, k, v, attention out, ln_2 in and out
#                     (C each), the MLP's hidden layer before and after GELU (4·C each)
KEPT_BY_MLP = 10  # of those, what an attention-only block (model.mlp: false) does not keep: ln_2's, the MLP's


def parameter_count(c: GPTConfig) -> int:
    """GPT(c).num_params(), computed from the sizes alone (the tied LM head counted once)."""
    C = c.n_embd
    layer_norm = C * (2 if c.bias else 1)  # gain, and a bias when there are biases
    attention = 4 * C * C + ((3 * C + C) if c.bias else 0) + layer_norm  # qkv 3C², out C², biases; ln_1
    mlp = 8 * C * C + ((4 * C + C) if c.bias else 0) + layer_norm  # in 4C², out 4C², biases; ln_2
    block = attention + (mlp if c.mlp else 0)
    return c.vocab_size * C + c.block_size * C + c.n_layer * block + layer_norm


def activation_bytes(c: GPTConfig, batch_size: int, value_bytes: int) -> int:
    """A lower bound on what one micro-batch's forward and backward hold at once, in bytes;
    `value_bytes` per activation value (4 in float32, 2 under autocast)."""
    per_block = KEPT_PER_BLOCK - (0 if c.mlp else KEPT_BY_MLP)
    kept = (per_block * c.n_layer + 2) * c.n_embd * value_bytes  # the blocks, then ln_f's in and out
    loss = 2 * c.vocab_size * 4  # log-softmax, and the logits or their gradient, float32
    ids = 2 * 8  # input and target, int64
    return batch_size * c.block_size * (kept + loss + ids)


def check_fits(c: GPTConfig, batch_size: int, device: torch.device, dtype: str) -> None:
    """Raise UserError when training in `dtype` could not fit in the device's free memory."""
    free = free_memory(device)
    state = parameter_count(c) * TRAINING_BYTES_PER_PARAMETER
    activations = activation_bytes(c, batch_size, getattr(torch, dtype).itemsize)
    if free is None or state + activations <= free:
        return
    if state > free:
        raise UserError(
            f"the model is too large to train here: {parameter_count(c):,} parameters need at least "
            f"{state / GiB:,.1f} GiB (weights, gradients and AdamW state), and {device.type} has "
            f"{free / GiB:,.1f} GiB free; make model.n_embd or model.n_layer smaller"
        )
    raise UserError(
        f"the batch is too large to train here: {batch_size:,} × {c.block_size} tokens need at least "
        f"{activations / GiB:,.1f} GiB for the backward pass, on top of {state / GiB:,.1f} GiB for the "
        f"model, and {device.type} has {free / GiB:,.1f} GiB free; make train.batch_size smaller "
        "(train.grad_accum_steps keeps the batch per optimizer step) or model.block_size"
    )
