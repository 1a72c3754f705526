"""A checkpoint being looked at, and what its views read of it once: the validation split (and the ids
that end words and lines), the heads' scores and their mean outputs.

A command makes one for its checkpoint and `tinygpt.load` one for the loaded model, so that the
corpus is read once, not once per view (heads, mean ablation, circuits), and a second view of a
model reuses what the first computed. The head scores are kept beside the checkpoint as well
(explain.heads_cache), so a later command starts from them. What is remembered here belongs to the
weights as they were: a change to them in place (which bumps a parameter's version) computes it again,
and while hooks are attached (heads switched off) nothing is remembered.
"""

from pathlib import Path

import torch

from tinygpt.explain.ablate import mean_head_outputs, mean_windows
from tinygpt.explain.heads import Heads, check_windows, kept_heads, scoring_text
from tinygpt.explain.roles import Boundaries
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.model import GPT


class Inspected:
    """The checkpoint at `path`, read (`saved`), and its model built (`model`)."""

    def __init__(self, path: str | Path, saved: Checkpoint, model: GPT):
        self.path, self.saved, self.model = Path(path), saved, model
        self._text: tuple[torch.Tensor, Boundaries] | None = None
        self._heads: dict[tuple, Heads] = {}
        self._means: dict[tuple, list[torch.Tensor]] = {}

    def validation(self) -> tuple[torch.Tensor, Boundaries]:
        """The validation ids the model is scored on and the ids that end a word or a line (a UserError,
        not remembered, when the corpus is not at hand)."""
        if self._text is None:
            self._text = scoring_text(self.saved, self.model, self.path, None)
        return self._text

    def heads(self, windows: int | None = None) -> Heads:
        """Every head's report on `windows` validation windows (default: heads.default_count's)."""
        check_windows(None, self.model.config.block_size, windows)
        val, ends = self.validation()
        check_windows(val, self.model.config.block_size, windows)
        key = (windows, self._weights())
        if key not in self._heads or self.model.hook_points.active:
            found = kept_heads(self.saved, self.model, self.path, val, ends, windows)
            if self.model.hook_points.active:
                return found
            self._heads[key] = found
        return self._heads[key]

    def means(self) -> list[torch.Tensor]:
        """Each layer's mean head outputs over ablate.mean_windows of the validation text, (nh·hs,) per
        layer: what --ablate-mode mean puts in a switched-off head's place."""
        key = self._weights()
        if key not in self._means or self.model.hook_points.active:
            val, _ = self.validation()
            windows = mean_windows(val, self.model.config.block_size)  # (N, T): inputs only
            found = mean_head_outputs(self.model, windows.to(self.model.wte.weight.device))
            if self.model.hook_points.active:
                return found
            self._means[key] = found
        return self._means[key]

    def _weights(self) -> tuple:
        """What identifies the weights as they are now: each parameter and its version (in-place changes
        bump it)."""
        return tuple((id(p), p._version) for p in self.model.parameters())
