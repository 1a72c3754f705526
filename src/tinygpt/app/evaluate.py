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

`evaluate_checkpoint` (the `tinygpt evaluate` command) scores a saved model this
way on a split of the corpus it trained on, or of another corpus, split by the
run's own val_fraction.
"""

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from tinygpt.config.run_config import DataSection, from_dict
from tinygpt.data.corpus import Corpus, load_corpus
from tinygpt.device import pick_device
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import Checkpoint, read_checkpoint
from tinygpt.model import GPT
from tinygpt.tokenizer import CharTokenizer

SPLITS = ("val", "train")


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


@dataclass
class Evaluation:
    """A checkpoint's loss on one split of a corpus, every character after the first predicted once."""

    checkpoint: str
    step: int | None
    split: str
    corpus: Path
    characters: int
    loss: float

    def summary(self) -> str:
        step = f" (step {self.step})" if self.step is not None else ""
        name = {"val": "validation", "train": "training"}[self.split]
        return (
            f"{self.checkpoint}{step}: loss {self.loss:.4f} on the {name} split of {self.corpus} "
            f"({self.characters:,} characters, each after the first predicted once)"
        )


def evaluate_checkpoint(
    checkpoint: str | Path,
    corpus: str | None = None,
    split: str = "val",
    batch_size: int = 64,
    device: str = "auto",
    progress: bool = True,
) -> Evaluation:
    """The split_loss of a saved model on a split of its own corpus (from its config), or of `corpus`."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if batch_size < 1:
        raise UserError(f"--batch-size {batch_size} is below 1; use 1 or more")
    dev = pick_device(device)
    saved = read_checkpoint(checkpoint)
    model = saved.build_model(checkpoint).to(dev)
    data = _data_section(saved, checkpoint, corpus)
    loaded = load_corpus(data, model.config.block_size, "--corpus")  # a trained model: its block is set
    ids = _in_vocabulary(getattr(loaded, split), loaded, saved.tokenizer)
    loss = split_loss(model, ids.to(dev), batch_size, progress=progress)
    return Evaluation(str(checkpoint), saved.step, split, loaded.path, len(ids), loss)


def _data_section(saved: Checkpoint, checkpoint: str | Path, corpus: str | None) -> DataSection:
    """The run's data section (its corpus, its val_fraction), with the corpus replaced if one is given."""
    if saved.config is not None:
        data = from_dict(saved.config, source=f"the config inside {checkpoint}").data
    elif corpus is None:
        raise UserError(
            f"checkpoint {checkpoint} does not say which corpus it trained on; pass --corpus FILE"
        )
    else:
        data = DataSection()
    if corpus is not None:
        data.corpus = corpus
    return data


def _in_vocabulary(ids: torch.Tensor, corpus: Corpus, tokenizer: CharTokenizer) -> torch.Tensor:
    """A split's ids (in the corpus's own vocabulary) as the checkpoint's ids for the same characters."""
    model_ids = {c: i for i, c in enumerate(tokenizer.chars)}
    missing = [c for c in corpus.tokenizer.chars if c not in model_ids]
    if missing:
        shown = ", ".join(repr(c) for c in missing[:10]) + (", …" if len(missing) > 10 else "")
        raise UserError(
            f"corpus {corpus.path} has {len(missing)} character(s) the checkpoint's vocabulary lacks: "
            f"{shown}; evaluate on text made of the characters the model was trained on"
        )
    remap = torch.tensor([model_ids[c] for c in corpus.tokenizer.chars])
    return remap[ids.long()]
