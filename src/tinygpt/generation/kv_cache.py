"""The KV cache: each layer's keys and values so far, so a new position attends without recomputing them.

The model's forward pass takes one (and stores into it); tinygpt.generation.sampling decides
when to fill, extend and refill it.
"""

from typing import Protocol

import torch


class Sizes(Protocol):
    """What the cache needs of a model's config (a GPTConfig has all of it)."""

    n_layer: int
    n_head: int
    block_size: int

    @property
    def head_size(self) -> int: ...


class KVCache:
    """Pre-allocated (B, nh, block_size, hs) key and value buffers for each layer."""

    def __init__(self, config: Sizes, batch_size: int):
        self.config = config
        self.batch_size = batch_size
        self.keys: list[torch.Tensor | None] = [None] * config.n_layer
        self.values: list[torch.Tensor | None] = [None] * config.n_layer
        self.length = 0  # positions stored; also the position of the next token

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this step's keys and values (B, nh, T, hs); return all so far (B, nh, length + T, hs)."""
        if self.keys[layer] is None:  # allocate on first use, in the dtype autocast produced
            shape = (self.batch_size, self.config.n_head, self.config.block_size, self.config.head_size)
            self.keys[layer] = torch.empty(shape, dtype=k.dtype, device=k.device)
            self.values[layer] = torch.empty(shape, dtype=v.dtype, device=v.device)
        start, new = self.length, k.size(2)
        keys, values = self.keys[layer], self.values[layer]
        keys.narrow(2, start, new).copy_(k)  # narrow: a view in one call, cheaper than slicing
        values.narrow(2, start, new).copy_(v)
        return keys.narrow(2, 0, start + new), values.narrow(2, 0, start + new)

    def advance(self, steps: int) -> None:
        """Called by the model once every layer has stored this step's positions."""
        self.length += steps

    def reset(self) -> None:
        """Forget every position (the buffers are kept and overwritten)."""
        self.length = 0
