"""How good a feature dictionary is, measured on the validation split: as a reconstruction, and in the model.

On consecutive validation windows (every position once, up to EVAL_POSITIONS):

    l0                   latents firing per position (at most k)
    explained_variance   1 − Σ‖x − x̂‖² / Σ‖x − mean x‖² (tinygpt.explain.dictionary.quality)
    dead_fraction        latents that never fire on them; dense_fraction: those firing on > 10% of them
    loss                 the model's loss (nats per character), as it is
    spliced_loss         … with the activation replaced by its reconstruction x̂ (a replacing hook)
    zero_loss            … with the activation replaced by zeros (the site ablated)
    loss_increase        spliced_loss − loss: what the dictionary's error costs the model
    recovered            (zero_loss − spliced_loss) / (zero_loss − loss): the share of what the site does for
                         the loss that the reconstruction keeps (1: all of it; 0: no better than zeros)
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tinygpt.explain.dictionary import TopKDictionary, quality
from tinygpt.model import GPT

EVAL_POSITIONS = 65_536
WINDOWS = 64  # windows per forward pass

Replace = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Evaluation:
    """A dictionary's numbers on the validation windows, and its latents at each position."""

    summary: dict[str, float]  # the numbers above
    densities: torch.Tensor  # (n,): each latent's share of positions on which it fires
    values: torch.Tensor  # (N, k): the kept latents' values at each position, in order (ReLU'd)
    indices: torch.Tensor  # (N, k): which latents they are
    stream_scale: float  # the mean standard deviation of the last residual stream, what ln_f divides by


def evaluation_windows(ids: torch.Tensor, block_size: int, positions: int = EVAL_POSITIONS) -> tuple:
    """Consecutive windows from a split's start, every position once: x (W, T), y (W, T) the next ids."""
    count = max(1, min(positions // block_size, (len(ids) - 1) // block_size))
    run = ids[: count * block_size + 1].long()
    return run[:-1].view(count, block_size), run[1:].view(count, block_size)  # (W, T), (W, T)


def reconstruction(dictionary: TopKDictionary) -> Replace:
    """activation (…, d) -> its reconstruction x̂ (…, d), in the layer's own units."""

    def replace(acts: torch.Tensor) -> torch.Tensor:
        x_hat, _ = dictionary(acts.reshape(-1, acts.size(-1)).float())  # (N, d)
        return x_hat.view_as(acts).to(acts.dtype)

    return replace


@torch.no_grad()
def loss_with(model: GPT, hook: str, replace: Replace | None, x: torch.Tensor, y: torch.Tensor) -> float:
    """The model's mean loss on x -> y (W, T) with the activation at `hook` replaced (None: as it is)."""
    hooks = {hook: lambda acts, _name: replace(acts)} if replace is not None else {}
    total = 0.0
    device = model.wte.weight.device
    with model.hooks(hooks):
        for xb, yb in zip(x.split(WINDOWS), y.split(WINDOWS), strict=True):
            logits, _ = model(xb.to(device))  # (w, T, vocab)
            total += F.cross_entropy(
                logits.flatten(0, 1).float(), yb.to(device).flatten(), reduction="sum"
            ).item()
    return total / x.numel()


@torch.no_grad()
def activations_at(model: GPT, hook: str, x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The activations at `hook` on x (W, T) as rows (W·T, d), and the last stream's mean deviation."""
    last = f"blocks.{model.config.n_layer - 1}.resid_post"  # what ln_f normalises
    rows, spread = [], 0.0
    for xb in x.split(WINDOWS):
        _, found = model.run_with_cache(xb.to(model.wte.weight.device), names=[hook, last])
        rows.append(found[hook].reshape(-1, found[hook].size(-1)).float())
        spread += (found[last].float().var(dim=-1, unbiased=False) + 1e-5).sqrt().sum().item()
    return torch.cat(rows), spread / x.numel()


@torch.no_grad()
def assess(model: GPT, dictionary: TopKDictionary, hook: str, x: torch.Tensor, y: torch.Tensor) -> Evaluation:
    """The dictionary of `hook` scored on x -> y (W, T) (the numbers at the top), with its latents there."""
    model.eval()
    acts, stream_scale = activations_at(model, hook, x)  # (N, d)
    found = quality(dictionary, acts)
    densities = found.pop("densities")
    clean = loss_with(model, hook, None, x, y)
    spliced = loss_with(model, hook, reconstruction(dictionary), x, y)
    zero = loss_with(model, hook, torch.zeros_like, x, y)
    recovered = (zero - spliced) / (zero - clean) if zero > clean else float("nan")
    summary = found | {
        "positions": x.numel(),
        "loss": clean,
        "spliced_loss": spliced,
        "zero_loss": zero,
        "loss_increase": spliced - clean,
        "recovered": recovered,
    }
    tops = [dictionary.top(rows) for rows in acts.split(4096)]
    values = torch.cat([v for v, _ in tops]).cpu()  # (N, k)
    indices = torch.cat([i for _, i in tops]).cpu()  # (N, k)
    return Evaluation(summary, densities, values, indices, stream_scale)
