"""The optimizer `train.optimizer` names: AdamW for every parameter, or Muon for the blocks' matrices.

- `adamw`: AdamW, with weight decay on matrices (dim ≥ 2) only; biases and norms' gains stay
  undecayed. Fused (one kernel per tensor for the whole update) on CUDA and on CPU from torch 2.4.
- `muon`: Muon for the 2-D weights inside the transformer blocks
  (attention's Q/K/V and output projections, the MLP's two layers), AdamW as above for the rest:
  the embeddings (which the LM head shares), the gains and the biases. Muon replaces each
  matrix's momentum by the nearest semi-orthogonal matrix (a few Newton–Schulz iterations), scaled
  to the RMS an AdamW update would have (`match_rms_adamw`), so the two share one learning rate,
  schedule and weight decay. torch runs those iterations in bfloat16: fast on GPUs and on CPUs
  with AVX-512 BF16 or AMX, several times slower than float32 on the others. So a CPU run that
  computes in float32 (train.dtype auto on a CPU without bfloat16 units, or float32) steps with
  `tinygpt.training.muon.Float32Muon`, torch's Muon with those iterations in float32; so does
  any run on a torch older than 2.9, which has no Muon of its own.

`Muon` and `AdamW` are combined into one `MuonWithAdamW`, which the step, the gradient scaler and
the checkpoint treat as one optimizer.
"""

from typing import Any

import torch
from torch.torch_version import TorchVersion

from tinygpt.config.run_config import TrainSection
from tinygpt.model import GPT
from tinygpt.training.muon import Float32Muon
from tinygpt.training.precision import resolve_dtype

OPTIMIZERS = ("adamw", "muon")


def make_optimizer(model: GPT, t: TrainSection, device: torch.device) -> torch.optim.Optimizer:
    """The optimizer `t.optimizer` names, over the model's trainable parameters (the tied weight once)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if t.optimizer == "adamw":
        return _adamw([p for _, p in named], t, device)
    hidden = [p for n, p in named if p.dim() == 2 and n.startswith("h.")]  # the blocks' matrices
    rest = [p for n, p in named if not (p.dim() == 2 and n.startswith("h."))]
    assert len(hidden) + len(rest) == len(named), "every parameter in exactly one optimizer"
    # torch's Muon orthogonalises in bfloat16, slow on a CPU that computes in float32 (no bfloat16 units)
    float32_cpu = device.type == "cpu" and resolve_dtype(t.dtype, device) == "float32"
    torch_has_muon = hasattr(torch.optim, "Muon")  # from torch 2.9
    muon_class = torch.optim.Muon if torch_has_muon and not float32_cpu else Float32Muon
    muon = muon_class(hidden, lr=t.learning_rate, weight_decay=t.weight_decay, adjust_lr_fn="match_rms_adamw")
    return MuonWithAdamW(muon, _adamw(rest, t, device))


def _adamw(params: list[torch.Tensor], t: TrainSection, device: torch.device) -> torch.optim.AdamW:
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device.type == "cuda" or (device.type == "cpu" and TorchVersion(torch.__version__) >= "2.4")
    return torch.optim.AdamW(groups, lr=t.learning_rate, betas=tuple(t.betas), fused=fused, foreach=not fused)


class MuonWithAdamW:
    """Muon for some parameters and AdamW for the others, stepped, zeroed and saved as one optimizer.

    `param_groups` lists Muon's groups then AdamW's (the step sets each group's learning rate;
    the gradient scaler unscales every group); the state dict is {"muon": …, "adamw": …}.
    """

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.AdamW):
        self.parts = {"muon": muon, "adamw": adamw}
        self.param_groups = muon.param_groups + adamw.param_groups

    @property
    def state(self) -> dict:
        """Both parts' per-parameter state (their parameters are disjoint)."""
        return {**self.parts["muon"].state, **self.parts["adamw"].state}

    def step(self) -> None:
        for part in self.parts.values():
            part.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts.values():
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {name: part.state_dict() for name, part in self.parts.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(state_dict, dict) or set(state_dict) != set(self.parts):
            raise ValueError(f"a Muon-with-AdamW state has the parts {sorted(self.parts)}")
        for name, part in self.parts.items():
            part.load_state_dict(state_dict[name])
