"""The loss over a whole split: every character after the first predicted exactly once.

Training estimates the validation loss from a few random windows (fast, noisy).
`split_loss` instead cuts the split into consecutive windows of block_size
targets and averages the loss over all of them, so two models (or two runs)
are compared on exactly the same characters:

    ids:      c0 c1 c2 c3 c4 c5 c6 c7 c8 c9            (block_size 4)
    inputs:   [c0 c1 c2 c3] [c4 c5 c6 c7] [c8]
    targets:  [c1 c2 c3 c4] [c5 c6 c7 c8] [c9]          the last window is shorter

Each window starts from an empty context, as at the start of a sample, so a
character early in its window is predicted from less context than one late in it.
"""

from contextlib import AbstractContextManager, nullcontext

import torch
from tqdm import tqdm

from tinygpt.model import GPT


@torch.no_grad()
def split_loss(
    model: GPT,
    ids: torch.Tensor,
    batch_size: int = 64,
    autocast: AbstractContextManager | None = None,
    progress: bool = True,
) -> float:
    """Mean cross-entropy (nats per character) of predicting ids[1:] within block_size windows.

    Args:
        model: the model to evaluate (left in the train/eval mode it was in).
        ids: the split's character ids (N,), any integer dtype, on any device.
        batch_size: windows per forward pass.
        autocast: the precision context to run in (default: none, the weights' dtype).
        progress: show a progress bar.
    """
    block_size = model.config.block_size
    targets_total = len(ids) - 1
    if targets_total < 1:
        raise ValueError("a split needs at least two characters to predict one")
    device = next(model.parameters()).device
    autocast = autocast or nullcontext()
    n_full = targets_total // block_size
    x_all = ids[: n_full * block_size].view(n_full, block_size)  # (W, T): consecutive windows
    y_all = ids[1 : n_full * block_size + 1].view(n_full, block_size)  # (W, T): one character ahead
    batches = [(x_all[i : i + batch_size], y_all[i : i + batch_size]) for i in range(0, n_full, batch_size)]
    rest = targets_total - n_full * block_size
    if rest:  # the tail that does not fill a window: one shorter window
        start = n_full * block_size
        batches.append((ids[start : start + rest].view(1, rest), ids[start + 1 :].view(1, rest)))

    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)  # summed on the device: no sync per batch
    for x, y in tqdm(batches, desc="evaluating", unit="batch", disable=not progress, leave=False):
        x, y = x.to(device, torch.long), y.to(device, torch.long)
        with autocast:
            _, loss = model(x, y)  # mean over this batch's targets
        total += loss.double() * y.numel()
    model.train(was_training)
    return total.item() / targets_total
