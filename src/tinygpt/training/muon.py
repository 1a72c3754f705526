"""Muon's orthogonalisation in float32, for CPUs without bfloat16 units, and Muon stepping with it.

Muon (Jordan et al., 2024, "Muon: an optimizer for hidden layers in neural networks") replaces a
matrix's momentum G = U S Vᵀ by about U Vᵀ, its polar factor: every direction of the update gets
the same size, whatever the gradient's spread of singular values. It gets there without an SVD, by
a few Newton–Schulz iterations of an odd quintic on the matrix scaled to Frobenius norm 1 (so each
singular value s is in (0, 1]):

    X ← a·X + b·(X Xᵀ) X + c·(X Xᵀ)² X,    which maps each singular value s ↦ a·s + b·s³ + c·s⁵

and leaves the singular vectors alone. The coefficients (a, b, c) = (3.4445, −4.7750, 2.0315),
Muon's published ones, make the slope at 0 large (small singular values grow fast), at the price
of not settling at exactly 1: five iterations leave them spread around 1 (tests/training/test_optimizer.py
measures the spread), which Muon's authors found trains as well as the exact U Vᵀ.

torch.optim.Muon runs the iterations in bfloat16, always. That is fast on GPUs and on CPUs with
AVX-512 BF16 or AMX, and several times slower than float32 on CPUs without them (BENCHMARKS.md):
so `Float32Muon` is torch's Muon with only this one step done in float32. It keeps torch's
hyper-parameters and per-parameter state (`momentum_buffer`), so a checkpoint moves between the two.
"""

import math

import torch

COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Muon's quintic: a, b, c


def orthogonalise(
    matrix: torch.Tensor,
    steps: int = 5,
    coefficients: tuple[float, float, float] = COEFFICIENTS,
    dtype: torch.dtype = torch.float32,
    eps: float = 1e-7,
) -> torch.Tensor:
    """About U Vᵀ for matrix = U S Vᵀ (m, n), by `steps` Newton–Schulz iterations in `dtype`."""
    a, b, c = coefficients
    x = matrix.to(dtype)
    wide = x.size(0) <= x.size(1)
    if not wide:  # iterate on the wide side: X Xᵀ is the smaller Gram matrix
        x = x.T  # (n, m)
    x = x / x.norm().clamp(min=eps)  # Frobenius norm 1 ≥ the largest singular value
    for _ in range(steps):
        gram = x @ x.T  # (k, k), k the smaller side
        polynomial = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b·XXᵀ + c·(XXᵀ)²
        x = torch.addmm(x, polynomial, x, beta=a)  # a·X + (b·XXᵀ + c·(XXᵀ)²)·X
    return x if wide else x.T


class Float32Muon(torch.optim.Optimizer):
    """torch.optim.Muon's update with the orthogonalisation in float32, for 2-D parameters.

    Per parameter: momentum buffer B ← μ·B + (1 − μ)·G; the update is G + μ·(B − G) with
    Nesterov (else B), orthogonalised; then decoupled weight decay and a step of lr scaled
    by adjust_lr_fn, as torch's Muon does. Its defaults and state are torch's Muon's too
    (torch's class is not subclassed: it arrived in torch 2.9, this one runs on older ones).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = COEFFICIENTS,
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
    ):
        defaults = dict(
            lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
            ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn,
        )  # fmt: skip
        super().__init__(params, defaults)
        if any(p.dim() != 2 for group in self.param_groups for p in group["params"]):
            raise ValueError("Muon orthogonalises matrices: every parameter must be 2-D")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buffer = state["momentum_buffer"]
                buffer.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buffer, momentum) if group["nesterov"] else buffer
                update = orthogonalise(update, group["ns_steps"], group["ns_coefficients"], eps=group["eps"])
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update.to(p.dtype), alpha=-lr * _lr_scale(group["adjust_lr_fn"], p.shape))
        return loss


def _lr_scale(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch's Muon's learning-rate scale for an (A, B) matrix: match_rms_adamw gives the update
    the RMS of an AdamW update (Liu et al., 2025, "Muon is scalable for LLM training")."""
    rows, cols = shape[:2]
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return math.sqrt(max(1, rows / cols))  # "original" (or None): Keller Jordan's
