"""A dictionary of features: a TopK sparse autoencoder trained on one layer's activations.

A neuron often answers to several unrelated things, because a layer of d numbers
holds more ideas than it has neurons. A sparse autoencoder rewrites each activation
vector x as a sum of a few of n > d learned unit directions (the decoder's rows), each
with a nonnegative weight (a latent); a direction that is used for one thing only is
easier to describe than a neuron. TopK (Gao et al. 2024, "Scaling and evaluating sparse
autoencoders") keeps the k largest pre-activations of each row and zeroes the rest, so
the sparsity is chosen directly instead of tuned through an L1 penalty that would also
shrink the latents it keeps.

The recipe, after Gao et al.:

    scale     inputs are multiplied by one number so that their mean squared norm is d:
              the learning rate and the losses then mean the same on every layer
    init      decoder rows random unit directions, the encoder their transpose (each
              latent starts out reading the direction it writes), b_dec the mean of the
              first batch
    loss      mean squared error of the scaled reconstruction, plus AuxK / 32
    AuxK      a latent that has not fired for `dead_after` tokens is dead; the top k_aux
              (d/2, or fewer when fewer are dead) of the dead latents' pre-activations
              reconstruct what the live ones missed, so dead latents get gradient again
    step      Adam; the part of each decoder row's gradient along the row is removed
              before the step and the rows set back to unit norm after it, so that a
              latent's size lives in the latent, not in its direction's norm
    schedule  linear warm-up over the first 5% of steps, linear decay to 0 over the last 20%
"""

import itertools
import math
import time
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

WARMUP = 0.05  # share of the steps over which the learning rate rises from 0
DECAY = 0.2  # share of the steps, at the end, over which it falls back to 0
DENSE = 0.1  # a latent firing on more than this share of rows is dense


class TopKDictionary(nn.Module):
    """x (N, d) ≈ decode(encode(x)), with at most k of the n latents nonzero in each row.

    `input_scale` multiplies activations before encoding so that their mean squared norm
    is d (set from the first batch by `train_dictionary`); reconstructions are divided by
    it, so `decode` and `forward` answer in the layer's own units.
    """

    def __init__(
        self, d: int, n: int, k: int, input_scale: float = 1.0, generator: torch.Generator | None = None
    ):
        super().__init__()
        directions = torch.randn(n, d, generator=generator)  # (n, d)
        directions = directions / directions.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(directions)  # (n, d): unit rows
        self.W_enc = nn.Parameter(directions.t().clone())  # (d, n)
        self.b_enc = nn.Parameter(torch.zeros(n))
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.k = k
        self.input_scale = float(input_scale)

    def get_extra_state(self) -> dict:
        """k and the input scale travel in the state_dict, so a saved dictionary reloads whole."""
        return {"k": self.k, "input_scale": self.input_scale}

    def set_extra_state(self, state: dict) -> None:
        self.k, self.input_scale = int(state["k"]), float(state["input_scale"])

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """(x·scale − b_dec) @ W_enc + b_enc: (N, d) -> (N, n).

        Written as x·scale @ W_enc + (b_enc − b_dec @ W_enc) so that nothing upstream of the
        matmul needs a gradient: backward then computes only W_enc's gradient, not also the
        input's (a second matmul as large as the first).
        """
        bias = self.b_enc - self.b_dec @ self.W_enc  # (n,)
        return torch.addmm(bias, x * self.input_scale, self.W_enc)  # (N, n)

    def top(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The k kept latents of each row: values (N, k), ReLU'd, and their indices (N, k)."""
        values, indices = self.pre_activations(x).topk(self.k, dim=1, sorted=False)  # (N, k) each
        return values.relu(), indices

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Latents (N, n): the top k pre-activations of each row, ReLU'd, zeros elsewhere."""
        values, indices = self.top(x)
        return values.new_zeros(x.size(0), self.W_dec.size(0)).scatter_(1, indices, values)  # (N, n)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Reconstruction in the layer's units: latents (N, n) -> (N, d)."""
        return (latents @ self.W_dec + self.b_dec) / self.input_scale

    def decode_top(self, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """Scaled reconstruction from k values and indices per row: (N, k), (N, k) -> (N, d).

        A weighted sum of k gathered decoder rows (embedding_bag), chosen over scattering into
        (N, n) and a dense matmul because it does k·d work per row instead of n·d: measured
        single-threaded at n 1024, k 16, it is over an order of magnitude faster, and its
        backward touches only the rows used.
        """
        return F.embedding_bag(indices, self.W_dec, per_sample_weights=values, mode="sum") + self.b_dec

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_hat (N, d) in the layer's units, latents (N, n))."""
        values, indices = self.top(x)
        x_hat = self.decode_top(values, indices) / self.input_scale  # (N, d)
        latents = values.new_zeros(x.size(0), self.W_dec.size(0)).scatter_(1, indices, values)  # (N, n)
        return x_hat, latents


def train_dictionary(
    batches: Iterable[torch.Tensor],
    d: int,
    n: int,
    k: int,
    steps: int,
    lr: float = 8e-3,
    seed: int = 0,
    progress: Callable[[int], object] | None = None,
    aux_scale: float = 1 / 32,
    dead_after: int = 20_000,
    start: TopKDictionary | None = None,
) -> tuple[TopKDictionary, dict]:
    """A TopK dictionary of n latents trained on activation batches (B, d), one Adam step per batch.

    Args:
        batches: float tensors (B, d) of one layer's activations, any B; the device is the first's.
            Training stops after `steps` batches, or earlier when they run out. The cost is per row
            (the encoder's matmul and top-k), so smaller batches buy more steps from the same
            rows: B of about 1024 trained better than 4096 or 256 on 600,000 rows.
        steps: the planned number of steps, which the learning-rate schedule spans.
        lr: Adam's peak learning rate.
        seed: seeds the initial directions (the only randomness: a run on CPU is repeatable).
        progress: called with 1 after each step (a tqdm bar's `update` fits).
        aux_scale: the weight of AuxK, 0 to switch it off.
        dead_after: tokens without firing after which a latent counts as dead.
        start: a dictionary to train further (in place, its scale kept) instead of a fresh one.
    Returns:
        (the dictionary in eval mode, a record: steps, tokens, mse and explained_variance on the
        last batch, dead_fraction at the end, seconds, d, n, k, lr, seed).
    """
    started = time.perf_counter()
    stream = iter(batches)
    first = next(stream, None)
    if first is None:
        raise ValueError("train_dictionary needs at least one batch of activations")
    if first.dim() != 2 or first.size(1) != d:
        raise ValueError(f"expected batches of shape (B, {d}), got {tuple(first.shape)}")
    dictionary = initialised(first.float(), n, k, seed) if start is None else start.train()
    optimizer = torch.optim.Adam(dictionary.parameters(), lr=lr)
    idle = torch.zeros(n, dtype=torch.long, device=first.device)  # tokens since each latent last fired
    done, tokens, last = 0, 0, {}
    for x in itertools.islice(itertools.chain([first], stream), steps):
        x = x.float()
        for group in optimizer.param_groups:
            group["lr"] = lr * schedule(done, steps)
        last = step(dictionary, optimizer, x, idle, dead_after, aux_scale)
        done, tokens = done + 1, tokens + x.size(0)
        if progress is not None:
            progress(1)
    record = {
        "steps": done,
        "tokens": tokens,
        **last,
        "dead_fraction": (idle >= dead_after).float().mean().item(),
    }
    record |= {"seconds": time.perf_counter() - started, "d": d, "n": n, "k": k, "lr": lr, "seed": seed}
    return dictionary.eval(), record


def initialised(first: torch.Tensor, n: int, k: int, seed: int) -> TopKDictionary:
    """A fresh dictionary whose scale and b_dec come from the first batch (B, d), on its device.

    b_dec is the batch's mean rather than its geometric median: the loss is squared error, and
    the mean is the constant that minimises it, so training starts from the best reconstruction
    that uses no latent at all.
    """
    generator = torch.Generator().manual_seed(seed)
    scale = math.sqrt(first.size(1) / first.pow(2).sum(dim=1).mean().clamp(min=1e-12).item())
    dictionary = TopKDictionary(first.size(1), n, k, input_scale=scale, generator=generator)
    with torch.no_grad():
        dictionary.b_dec.copy_(first.mean(dim=0) * scale)
    return dictionary.to(first.device)


def step(
    dictionary: TopKDictionary,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    idle: torch.Tensor,
    dead_after: int,
    aux_scale: float,
) -> dict:
    """One Adam step on x (B, d); idle (n,), the tokens since each latent fired, is updated in place."""
    loss, fired, last = losses(dictionary, x, idle >= dead_after, aux_scale)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    drop_parallel_gradient(dictionary.W_dec)
    optimizer.step()
    with torch.no_grad():
        dictionary.W_dec /= dictionary.W_dec.norm(dim=1, keepdim=True)
    idle += x.size(0)
    idle[fired] = 0
    return last


def schedule(done: int, steps: int) -> float:
    """The learning rate's multiplier for step `done` (from 0) of `steps`: a warm-up, flat, a decay to 0."""
    warmup, decay = max(1, round(WARMUP * steps)), max(1, round(DECAY * steps))
    return min(1.0, (done + 1) / warmup, (steps - done) / decay)


def losses(
    dictionary: TopKDictionary, x: torch.Tensor, dead: torch.Tensor, aux_scale: float
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The step's loss on x (B, d), the latents that fired (n,) bool, and its mse and explained variance.

    Everything is in scaled units, where the mean squared norm of a row is d: the mse is per number.
    """
    target = x * dictionary.input_scale  # (B, d)
    pre = dictionary.pre_activations(x)  # (B, n)
    values, indices = pre.topk(dictionary.k, dim=1, sorted=False)  # (B, k)
    values = values.relu()
    x_hat = dictionary.decode_top(values, indices)  # (B, d)
    mse = (x_hat - target).pow(2).mean()
    spread = (target - target.mean(dim=0)).pow(2).mean()
    fired = torch.zeros_like(dead)
    fired[indices[values > 0]] = True
    loss = mse
    if aux_scale > 0 and dead.any():
        loss = loss + aux_scale * aux_loss(dictionary, pre, dead, (target - x_hat).detach())
    ev = 1 - mse.item() / max(spread.item(), 1e-12)
    return loss, fired, {"mse": mse.item(), "explained_variance": ev}


def aux_loss(
    dictionary: TopKDictionary, pre: torch.Tensor, dead: torch.Tensor, residual: torch.Tensor
) -> torch.Tensor:
    """AuxK: how badly the dead latents' top pre-activations (B, n) reconstruct the residual (B, d).

    Normalised by the residual's own spread, so that its pull does not fade as the live
    latents' error shrinks.
    """
    columns = dead.nonzero().squeeze(1)  # (n_dead,)
    k_aux = min(max(1, residual.size(1) // 2), columns.numel())
    values, chosen = pre.index_select(1, columns).topk(k_aux, dim=1, sorted=False)  # (B, k_aux)
    weights = values.relu()
    guess = F.embedding_bag(
        columns[chosen], dictionary.W_dec, per_sample_weights=weights, mode="sum"
    )  # (B, d)
    spread = (residual - residual.mean(dim=0)).pow(2).sum(dim=1).mean().clamp(min=1e-12)
    return (guess - residual).pow(2).sum(dim=1).mean() / spread


@torch.no_grad()  # else the gradient gets a grad_fn and every step's graph stays alive: ~5 MB a step
def drop_parallel_gradient(W_dec: nn.Parameter) -> None:
    """Remove from each decoder row's gradient (n, d) its component along that (unit) row.

    The rows are set back to unit norm after each step; a gradient along a row would only
    change its norm, which the renormalisation undoes, while still moving Adam's moments.
    """
    if W_dec.grad is not None:
        along = (W_dec.grad * W_dec).sum(dim=1, keepdim=True)  # (n, 1)
        W_dec.grad -= along * W_dec.detach()


@torch.no_grad()
def quality(dictionary: TopKDictionary, activations: torch.Tensor, batch: int = 4096) -> dict:
    """How well the dictionary describes held-out activations (N, d), evaluated `batch` rows at a time.

    Returns l0 (mean nonzero latents per row), explained_variance (1 − Σ‖x − x̂‖² / Σ‖x − mean x‖²),
    dead_fraction (latents that never fire on these rows), dense_fraction (latents firing on more
    than DENSE of them) and densities (n,): each latent's share of rows on which it fires.
    """
    if activations.size(0) == 0:
        raise ValueError("quality needs at least one row of activations")
    x = activations.float()
    mean = x.double().mean(dim=0).float()  # (d,)
    error, spread = 0.0, 0.0
    counts = torch.zeros(dictionary.W_dec.size(0), dtype=torch.long, device=x.device)  # (n,)
    for rows in x.split(batch):
        x_hat, latents = dictionary(rows)  # (b, d), (b, n)
        error += (rows - x_hat).double().pow(2).sum().item()
        spread += (rows - mean).double().pow(2).sum().item()
        counts += (latents > 0).sum(dim=0)
    densities = (counts.double() / x.size(0)).float().cpu()  # (n,)
    return {
        "l0": counts.sum().item() / x.size(0),
        "explained_variance": 1 - error / spread if spread > 0 else float("nan"),
        "dead_fraction": (counts == 0).float().mean().item(),
        "dense_fraction": (densities > DENSE).float().mean().item(),
        "densities": densities,
    }
