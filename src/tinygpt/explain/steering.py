"""Steering: a feature's activation clamped to a value while the model runs, and what that does, as a number.

The clamp is a replacing hook on the feature's hook point (`blocks.L.mlp_out`, say). At each position it
encodes the activation x with the dictionary, reads the feature's latent z_f there (0 where it is not among
the k kept), and adds the decoded difference:

    x' = x + (value − z_f) · W_dec[f] / input_scale

so the feature now reads `value`, and everything the dictionary does not reconstruct (its error) stays as
it was: only the feature's own contribution changes. Several features of one hook point add their
differences; each is read from the unsteered x.

The effect is measured on the prompt: at each position, the log-probability that the next character is
one of the feature's promoted characters (tinygpt.explain.feature_notes), with the clamp and without,
averaged over the positions.

A value far beyond what the feature ever reads (1e40, say) drives the model past float32, and its logits
stop being numbers: that is said in one line (`refuse_overflow`, and the effects' own numbers) before
anything is sampled or reported.
"""

import math
from dataclasses import dataclass

import torch

from tinygpt.errors import UserError
from tinygpt.explain.features import dictionary_of
from tinygpt.files.feature_file import FeatureFile
from tinygpt.hooks import Hook
from tinygpt.model import GPT

PROMOTED = 5  # the promoted characters whose probability is measured


@dataclass
class Steer:
    """One feature clamped to one value."""

    features: FeatureFile
    feature: int
    value: float

    @property
    def hook(self) -> str:
        return f"blocks.{self.features.layer}.{self.features.site}"

    @property
    def name(self) -> str:
        return f"{self.features.site}.{self.features.layer}.{self.feature}"


def steering_hooks(steers: list[Steer]) -> dict[str, Hook]:
    """One replacing hook per hook point, clamping every steered feature there (see the top)."""
    by_hook: dict[str, list[Steer]] = {}
    for steer in steers:
        by_hook.setdefault(steer.hook, []).append(steer)
    return {hook: _clamp(group) for hook, group in by_hook.items()}


def _clamp(steers: list[Steer]) -> Hook:
    dictionary = dictionary_of(steers[0].features)
    chosen = torch.tensor([s.feature for s in steers])  # (m,)
    values = torch.tensor([s.value for s in steers], dtype=torch.float32)  # (m,)
    rows = dictionary.W_dec.detach()[chosen] / dictionary.input_scale  # (m, d): in the layer's units

    def clamp(acts: torch.Tensor, _name: str) -> torch.Tensor:
        flat = acts.reshape(-1, acts.size(-1)).float()  # (N, d)
        with torch.no_grad():
            latents = dictionary.to(flat.device).encode(flat)[:, chosen.to(flat.device)]  # (N, m)
        change = (values.to(flat.device) - latents) @ rows.to(flat.device)  # (N, d)
        return (flat + change).view_as(acts).to(acts.dtype)

    return clamp


@torch.no_grad()
def refuse_overflow(model: GPT, ids: list[int], steers: list[Steer], hooks: dict[str, Hook]) -> None:
    """Raise UserError when the steers (their hooks) make the model's logits on the prompt ids not finite."""
    device = model.wte.weight.device
    with model.hooks(hooks):
        logits, _ = model(torch.tensor([ids], device=device))  # (1, T, vocab)
    if not torch.isfinite(logits).all():
        raise _overflow(steers)


def _overflow(steers: list[Steer]) -> UserError:
    """The one line for steers that took the model past float32, with what each feature reads at most."""
    given = ", ".join(f"{s.name}={s.value:g}" for s in steers)
    reach = "; ".join(
        f"{s.name} reads at most {s.features.features[s.feature].get('max', 0.0):.3g} on the validation text"
        for s in steers
    )
    return UserError(
        f"--steer {given}: the model's logits on the prompt are no longer numbers (past float32); "
        f"{reach}: clamp to a value within some tens of times that"
    )


@torch.no_grad()
def promoted_log_prob(model: GPT, ids: list[int], promoted: list[int], hooks: dict[str, Hook]) -> float:
    """Mean over the prompt's positions of log P(next character ∈ promoted), with the hooks attached."""
    device = model.wte.weight.device
    with model.hooks(hooks):
        logits, _ = model(torch.tensor([ids], device=device))  # (1, T, vocab)
    log_probs = torch.log_softmax(logits[0].float(), dim=-1)  # (T, vocab)
    return torch.logsumexp(log_probs[:, promoted], dim=-1).mean().item()


def steering_effects(model: GPT, ids: list[int], chars: list[str], steers: list[Steer]) -> list[dict]:
    """For each steer, on the prompt ids: its promoted characters and their log-probability, unsteered and
    with every steer attached (the numbers `sample --steer` reports)."""
    model.eval()
    hooks = steering_hooks(steers)
    index = {c: i for i, c in enumerate(chars)}
    found = []
    for steer in steers:
        promoted = [c for c, _ in steer.features.features[steer.feature]["promoted"][:PROMOTED]]
        ids_promoted = [index[c] for c in promoted]
        before = promoted_log_prob(model, ids, ids_promoted, {})
        after = promoted_log_prob(model, ids, ids_promoted, hooks)
        if not math.isfinite(after):  # the logits were not numbers (refuse_overflow's case), no second pass
            raise _overflow(steers)
        found.append({"steer": steer.name, "value": steer.value, "promoted": promoted, "unsteered": before,
                      "steered": after, "change": after - before, "positions": len(ids)})  # fmt: skip
    return found
