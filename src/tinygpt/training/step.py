"""One optimizer step, its learning rate, and the loss estimate at evaluations."""

import math
from collections.abc import Callable

import torch

from tinygpt.config.run_config import TrainSection, decay_steps
from tinygpt.data.corpus import Batches
from tinygpt.training.distributed import ONE_PROCESS, Ranks
from tinygpt.training.precision import Precision


def global_batch(t: TrainSection, ranks: Ranks) -> int:
    """Sequences per optimizer step: the batch of each rank's micro-step × ranks × micro-steps."""
    return t.batch_size * ranks.world_size * t.grad_accum_steps


def lr_at(step: int, t: TrainSection) -> float:
    """Linear warm-up to learning_rate, then the decay to min_lr at max_iters that lr_schedule names.

    cosine: half a cosine from learning_rate down to min_lr over every step after the warm-up.
    wsd (warm-up, stable, decay): learning_rate until the last decay_steps(t) steps, then a
    straight line down to min_lr (Hägele et al., 2024, "Scaling laws and compute-optimal training
    beyond fixed training durations").
    """
    if step < t.warmup_iters:
        return t.learning_rate * (step + 1) / (t.warmup_iters + 1)
    if t.lr_schedule == "wsd":
        decay_start = t.max_iters - decay_steps(t)
        progress = min(1.0, max(0.0, (step - decay_start) / decay_steps(t)))
        return t.learning_rate + progress * (t.min_lr - t.learning_rate)
    span = max(1, t.max_iters - t.warmup_iters)
    progress = min(1.0, (step - t.warmup_iters) / span)
    return t.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t.learning_rate - t.min_lr)


class Abandoned(Exception):
    """A step left between its micro-batches because a stop was asked for; nothing of it was applied."""


def never() -> bool:
    return False


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    batches: Batches,
    generator: torch.Generator,
    t: TrainSection,
    lr: float,
    ranks: Ranks = ONE_PROCESS,
    abandon: Callable[[], bool] = never,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step over grad_accum_steps micro-batches: (last micro-batch's loss, gradient norm).

    Before each micro-batch after the first, `abandon()` is asked: when it says yes, the gradients
    gathered so far are dropped and Abandoned is raised, so that a stop asked for during a long step
    (many micro-batches) need not wait for its end. Under DDP, gradients are averaged across ranks
    on the last micro-batch only.
    The gradient norm is the whole gradient's, before clipping. Both stay on the
    device: reading them (.item()) would make the host wait for the device, so
    the loop does that only at log intervals and evaluations.
    """
    scaler = precision.scaler
    for group in optimizer.param_groups:
        group["lr"] = lr
    for micro_step in range(t.grad_accum_steps):
        if micro_step and abandon():
            optimizer.zero_grad(set_to_none=True)
            raise Abandoned
        x, y = batches.sample(generator)
        with ranks.sync_gradients(model, sync=micro_step == t.grad_accum_steps - 1):
            with precision.autocast:
                _, loss = model(x, y)
            # the loss is a mean per micro-batch: scale so the summed gradients average them
            scaler.scale(loss / t.grad_accum_steps).backward()
    scaler.unscale_(optimizer)  # the norm and the clip are of the true gradient, not float16's scaled one
    if t.grad_clip > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
    else:
        grad_norm = gradient_norm(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm


def gradient_norm(parameters) -> torch.Tensor:
    """The L2 norm of all the parameters' gradients together, as clip_grad_norm_ measures it."""
    norms = [torch.linalg.vector_norm(p.grad) for p in parameters if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(norms))


@torch.no_grad()
def estimate_loss(
    model: torch.nn.Module,
    splits: dict[str, Batches],
    iters: int,
    seed: int,
    autocast,
    ranks: Ranks = ONE_PROCESS,
    abandon: Callable[[], bool] = lambda: False,
) -> dict | None:
    """Mean loss over `iters` batches per split, the same batches at every evaluation.

    With several ranks, rank r evaluates batches r, r + world_size, …, and the
    sums are added up across ranks: the same mean as one process, sooner. One
    process gives up between batches once `abandon()` is true (a stop was asked
    for) and returns None.
    """
    model.eval()
    losses = {}
    for name, batches in splits.items():
        generator = torch.Generator().manual_seed(seed)
        total = torch.zeros((), device=batches.device)
        for i in range(iters):
            x, y = batches.sample(generator)  # every rank draws every batch, to stay in step
            if i % ranks.world_size != ranks.rank:
                continue
            if not ranks.distributed and abandon():
                model.train()
                return None
            with autocast:
                _, loss = model(x, y)
            total += loss.float()
        losses[name] = ranks.sum(total).item() / iters
    model.train()
    return losses
