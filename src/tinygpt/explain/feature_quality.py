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

from tinygpt.explain.ablate import rest_of_model
from tinygpt.explain.dictionary import TopKDictionary, quality
from tinygpt.hooks import caught
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


def layer_of(hook: str) -> int:
    """'blocks.L.site' -> L."""
    return int(hook.split(".")[1])


@torch.no_grad()
def up_to(model: GPT, hook: str, xb: torch.Tensor) -> tuple[torch.Tensor, Replace]:
    """The activation at `hook` (blocks.L.mlp_out or blocks.L.resid_post) on windows xb (w, T): (w, T, d),
    from a pass that stops after block L; and the stream entering block L + 1 made with another
    activation a (w, T, d) in its place: resid_mid + a for mlp_out (as the block adds them), a for
    resid_post."""
    layer = layer_of(hook)
    mid = f"blocks.{layer}.resid_mid"
    _, found = model.run_with_cache(xb, names=[hook, mid], stop_at_layer=layer + 1)
    if hook.endswith("resid_post"):
        return found[hook], lambda a: a
    return found[hook], lambda a: found[mid] + a


@torch.no_grad()
def activations_at(model: GPT, hook: str, x: torch.Tensor) -> torch.Tensor:
    """The activations at `hook` on x (W, T) as rows (W·T, d), the forward passes stopping at its layer."""
    device = model.wte.weight.device
    return torch.cat([up_to(model, hook, xb.to(device))[0].flatten(0, 1).float() for xb in x.split(WINDOWS)])


def summed_loss(logits: torch.Tensor, y: torch.Tensor) -> float:
    """The summed cross-entropy of logits (w, T, vocab) against y (w, T)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item()


@torch.no_grad()
def assess(model: GPT, dictionary: TopKDictionary, hook: str, x: torch.Tensor, y: torch.Tensor) -> Evaluation:
    """The dictionary of `hook` scored on x -> y (W, T) (the numbers at the top), with its latents there.

    Each batch of windows runs up to the hook's block once; the rest of the model then runs three
    times from there, with the activation as it is, reconstructed and zeroed: the losses a replacing
    hook on a whole forward pass gives, for fewer passes through the blocks before it."""
    model.eval()
    device, layer = model.wte.weight.device, layer_of(hook)
    final = f"blocks.{model.config.n_layer - 1}.resid_post"  # what ln_f normalises
    replacements = {"loss": None, "spliced_loss": reconstruction(dictionary), "zero_loss": torch.zeros_like}
    totals = dict.fromkeys(replacements, 0.0)
    rows, spread = [], 0.0
    for xb, yb in zip(x.split(WINDOWS), y.split(WINDOWS), strict=True):
        acts, entering = up_to(model, hook, xb.to(device))  # (w, T, d)
        for name, replace in replacements.items():
            kept = {}
            stream = entering(acts if replace is None else replace(acts))  # (w, T, C)
            with model.hooks({final: caught(kept)}):
                logits = rest_of_model(model, stream, layer + 1)  # (w, T, vocab)
            totals[name] += summed_loss(logits, yb.to(device))
            if replace is None:
                last = kept.get(final, stream)  # (w, T, C): the hook's own block is the last one
                spread += (last.float().var(dim=-1, unbiased=False) + 1e-5).sqrt().sum().item()
        rows.append(acts.flatten(0, 1).float())
    acts, stream_scale = torch.cat(rows), spread / x.numel()  # (N, d)
    clean, spliced, zero = (totals[name] / x.numel() for name in replacements)
    found = quality(dictionary, acts)
    densities = found.pop("densities")
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
