"""Named hook points: the one way into the model for every tool that reads or replaces an activation.

The model passes each activation below through `HookPoints.at(name, x)` on its way. With nothing
attached, `at` returns x at the cost of one test of an empty dict, and the model keeps its fast paths
(torch's fused attention; generation's fused one-position step). A hook is a function
`hook(activation, name)` that returns None (it only reads) or a tensor to use in its place (it
replaces). The trace, the logit lens, ablation, the backward pass, attribution, patching, the
neurons, feature dictionaries and steering all go through these names and nothing else.

| name                     | shape            | what it is                                                  |
|--------------------------|------------------|-------------------------------------------------------------|
| embed                    | (B, T, C)        | the token embedding, wte[idx]                               |
| pos_embed                | (T, C)           | the position embedding, wpe[offset … offset+T-1]            |
| blocks.L.resid_pre       | (B, T, C)        | the residual stream entering block L                        |
| blocks.L.ln1             | (B, T, C)        | ln_1 of it: what attention reads                            |
| blocks.L.attn.q|k|v      | (B, nh, T, hs)   | queries, keys, values per head (new positions only)         |
| blocks.L.attn.pattern    | (B, nh, T, Tk)   | attention weights, softmax(q·kᵀ/√hs + mask), before dropout |
| blocks.L.attn.z          | (B, nh, T, hs)   | each head's weighted sum of values, before c_proj           |
| blocks.L.attn_out        | (B, T, C)        | what attention adds to the stream: c_proj(heads side by side)|
| blocks.L.resid_mid       | (B, T, C)        | the stream after attention                                  |
| blocks.L.ln2             | (B, T, C)        | ln_2 of it: what the MLP reads                              |
| blocks.L.mlp.pre         | (B, T, 4C)       | the MLP's neurons before the GELU                           |
| blocks.L.mlp.post        | (B, T, 4C)       | the neurons after the GELU                                  |
| blocks.L.mlp_out         | (B, T, C)        | what the MLP adds to the stream                             |
| blocks.L.resid_post      | (B, T, C)        | the stream leaving block L                                  |
| ln_final                 | (B, T, C)        | ln_f of the last stream: what the LM head reads             |

An attention-only model (`model.mlp: false`) has no ln2, mlp.pre, mlp.post or mlp_out: its
resid_post is its resid_mid.

Tk is T plus what a KV cache holds. A hook on `blocks.L.attn.pattern` runs that layer's attention
through the plain formula (tinygpt.attention), which computes the weights; every other name is
reached on the fast path too. In TransformerLens these are `hook_embed`, `blocks.L.hook_resid_pre`,
`blocks.L.attn.hook_pattern`, … (docs/hooks.md has the table side by side).
"""

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch

from tinygpt.errors import UserError

Hook = Callable[[torch.Tensor, str], "torch.Tensor | None"]

BLOCK_SITES = (
    "resid_pre",
    "ln1",
    "attn.q",
    "attn.k",
    "attn.v",
    "attn.pattern",
    "attn.z",
    "attn_out",
    "resid_mid",
    "ln2",
    "mlp.pre",
    "mlp.post",
    "mlp_out",
    "resid_post",
)


MLP_SITES = ("ln2", "mlp.pre", "mlp.post", "mlp_out")


def block_sites(mlp: bool = True) -> tuple[str, ...]:
    """The sites of a block, in the order a forward pass reaches them; without an MLP, none of its."""
    return BLOCK_SITES if mlp else tuple(site for site in BLOCK_SITES if site not in MLP_SITES)


def hook_names(n_layer: int, mlp: bool = True) -> list[str]:
    """Every hook point of a model with n_layer blocks, in the order a forward pass reaches them."""
    blocks = [f"blocks.{layer}.{site}" for layer in range(n_layer) for site in block_sites(mlp)]
    return ["embed", "pos_embed", *blocks, "ln_final"]


class HookPoints:
    """The hooks attached to one model, by name; the model's modules share one of these."""

    def __init__(self, n_layer: int, mlp: bool = True):
        self.names = hook_names(n_layer, mlp)
        self.n_layer, self.mlp = n_layer, mlp
        self.active: dict[str, list[Hook]] = {}

    def at(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """x as the hooks on `name` leave it (x itself when none is attached)."""
        if not self.active or name not in self.active:
            return x
        for hook in self.active[name]:
            replaced = hook(x, name)
            if replaced is not None:
                x = _checked(replaced, x, name)
        return x

    def watched(self, name: str) -> bool:
        return name in self.active

    def matching(self, patterns: Iterable[str]) -> list[str]:
        """The names that match any of the patterns ('blocks.*.attn.pattern'); an unknown one is refused."""
        found: list[str] = []
        for pattern in patterns:
            matched = fnmatch.filter(self.names, pattern)
            if not matched:
                missing = "" if self.mlp else " (this model is attention-only: its blocks have no MLP)"
                raise UserError(
                    f"no hook point is called {pattern!r}{missing}; the names are embed, pos_embed, "
                    f"blocks.L.<{'|'.join(block_sites(self.mlp))}> for L in 0 … {self.n_layer - 1}, "
                    "and ln_final"
                )
            found += [name for name in matched if name not in found]
        return found

    @contextmanager
    def attached(self, hooks: dict[str, Hook]) -> Iterator[None]:
        """Inside the block, each hook runs at the names its key matches (after any attached earlier)."""
        placed = [(name, hook) for pattern, hook in hooks.items() for name in self.matching([pattern])]
        for name, hook in placed:
            self.active.setdefault(name, []).append(hook)
        try:
            yield
        finally:
            for name, hook in placed:
                self.active[name].remove(hook)
                if not self.active[name]:
                    del self.active[name]


def _checked(replaced: object, x: torch.Tensor, name: str) -> torch.Tensor:
    """A hook's replacement for x, refused in one line unless it can stand in x's place (the same shape,
    dtype and device): the model's next operation would fail on it with its own words, or broadcast it."""
    if not isinstance(replaced, torch.Tensor):
        raise UserError(
            f"the hook on {name} returned {type(replaced).__name__}, not a tensor; return a tensor of "
            f"shape {tuple(x.shape)} to replace the activation, or None to leave it as it is"
        )
    if (replaced.shape, replaced.dtype, replaced.device) != (x.shape, x.dtype, x.device):
        given = f"{tuple(replaced.shape)} {str(replaced.dtype).removeprefix('torch.')} on {replaced.device}"
        wanted = f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')} on {x.device}"
        raise UserError(
            f"the hook on {name} returned a tensor of shape {given}, where the activation is {wanted}; "
            "return one of the same shape, dtype and device (or None to leave it as it is)"
        )
    return replaced


def caught(into: dict[str, torch.Tensor]) -> Hook:
    """A hook that keeps each activation it sees in `into`, by name (as computed: not detached)."""

    def keep(x: torch.Tensor, name: str) -> None:
        into[name] = x

    return keep
