"""Catching a diverged run: a NaN or infinite loss stops training before it reaches a checkpoint.

Reading a loss on the host makes the host wait for the device; doing that
every step would stall a GPU. So each step's loss is copied into a small
buffer on the device (one tiny kernel, no waiting), and the buffer is read in
one go only when the loop checks it: at log intervals, where the loop waits for
the device anyway to show the loss, and before every checkpoint. A non-finite
loss is found at most log_interval steps late, always before a checkpoint
could save the weights it ruined, and is named by its exact step.
"""

import math

import torch


class LossWatch:
    """The losses of the steps since the last check, kept on the device."""

    def __init__(self, size: int, device: torch.device, last_checked: int):
        self.losses = torch.zeros(size, device=device)  # (size,): slot i is step last_checked + 1 + i
        self.last_checked = last_checked

    def add(self, step: int, loss: torch.Tensor) -> None:
        """Keep the loss of step `step` (counting from 1); does not wait for the device."""
        self.losses[step - self.last_checked - 1] = loss.detach()

    def check(self, step: int) -> tuple[int, float] | None:
        """(step, loss) of the first non-finite loss in the steps up to `step`, else None."""
        values = self.losses[: step - self.last_checked].tolist()  # the one wait for the device
        first = self.last_checked + 1
        self.last_checked = step
        return next(((first + i, v) for i, v in enumerate(values) if not math.isfinite(v)), None)
