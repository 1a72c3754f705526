"""Everything one training process needs before its first step, built the same way for
`tinygpt train` and `tinygpt bench`: precision, corpus, model, optimizer, batches, generator."""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tinygpt.config.run_config import RunConfig
from tinygpt.data.corpus import Batches, Corpus, load_corpus
from tinygpt.errors import UserError, shown
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.model import GPT, GPTConfig
from tinygpt.training.distributed import Ranks
from tinygpt.training.memory import check_fits
from tinygpt.training.optimizer import make_optimizer
from tinygpt.training.precision import Precision, check_compile_works, precision_for, prepare_device
from tinygpt.training.step import global_batch, lr_at, train_step

OTHER_TEXT = (
    "resume with the text the run trained on, or train a new run on this one with "
    "--set out_dir=checkpoints/<new name>"
)
RESUME_ADVICE = (  # best.pt: what --resume goes on from where there is no last.pt (run_dir.resume_point)
    "--resume needs it: put back a good copy, or move it away to resume from best.pt's weights, "
    "or start afresh with another out_dir"
)


@dataclass
class Setup:
    """A training process ready to step: `step(i)` takes optimizer step i exactly as training does."""

    config: RunConfig
    ranks: Ranks
    corpus: Corpus
    model: GPT  # the plain model: what checkpoints hold
    step_model: torch.nn.Module  # what the step runs: the model, compiled and/or in DDP
    optimizer: torch.optim.Optimizer
    precision: Precision
    splits: dict[str, Batches]  # "train" and "val" windows
    generator: torch.Generator  # this rank's stream of training batches

    @property
    def tokens_per_step(self) -> int:
        return global_batch(self.config.train, self.ranks) * self.config.model.block_size

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Optimizer step `step` (from 0); returns the loss and the gradient norm, still on the device."""
        t = self.config.train
        batches = self.splits["train"]
        return train_step(
            self.step_model,
            self.optimizer,
            self.precision,
            batches,
            self.generator,
            t,
            lr_at(step, t),
            self.ranks,
        )

    def _restore_optimizer(self, saved: Checkpoint) -> None:
        was = (saved.run_section("train") or {}).get("optimizer", "adamw")
        now = self.config.train.optimizer
        if was != now:
            raise UserError(
                f"--resume: the run trained with train.optimizer {was}, the config says {now}; "
                f"resume with the run's own config.yaml (or --set train.optimizer={was})"
            )
        self.optimizer.load_state_dict(_needed(saved.optimizer, "optimizer"))

    def rng_state(self) -> dict[str, torch.Tensor]:
        """This rank's random states, as a checkpoint keeps them."""
        state = {"torch": torch.get_rng_state(), "batches": self.generator.get_state()}
        if self.ranks.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.ranks.device)
        return state

    def restore(self, saved: Checkpoint, path: Path) -> None:
        """The optimizer and this rank's random states from a last.pt (weights are set up from it).

        A last.pt whose states are missing or do not fit this model (a best.pt copied over it,
        a file edited by hand) is a UserError naming it; nothing of it is half-applied to training.
        """
        try:
            self._restore_optimizer(saved)
            _check_optimizer_state(self.optimizer)
            by_rank = _needed(saved.rng, "rng")
            if self.ranks.rank >= len(by_rank):  # a rank the saved run did not have starts its own stream
                return
            state = by_rank[self.ranks.rank]
            torch.set_rng_state(state["torch"])
            self.generator.set_state(state["batches"])
            if self.ranks.device.type == "cuda" and "cuda" in state:
                torch.cuda.set_rng_state(state["cuda"], self.ranks.device)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as e:
            what = f"no {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
            raise UserError(
                f"--resume: {path} holds optimizer or random-generator state that this run cannot "
                f"take up ({what}); {RESUME_ADVICE}"
            ) from None


def set_up(
    config: RunConfig, ranks: Ranks, saved: Checkpoint | None = None, saved_path: Path | None = None
) -> Setup:
    """Build the process's training state; from `saved` (a last.pt) when resuming.

    Checks come first (precision, compile, the corpus, will it fit), so a mistake
    stops before any weight is allocated.
    """
    t, device = config.train, ranks.device
    prepare_device(device)
    precision = precision_for(t.dtype, device)
    if t.compile:
        check_compile_works(device)
    corpus = ranks.in_turn(lambda: load_corpus(config.data, config.model.block_size))
    model_config = GPTConfig(vocab_size=corpus.tokenizer.vocab_size, **vars(config.model))
    check_fits(model_config, t.batch_size, device, precision.dtype)

    torch.manual_seed(t.seed + ranks.rank)  # DDP gives every rank rank 0's weights; the rest is per rank
    if saved is not None:
        _check_same_text(saved, corpus, config, saved_path, ranks)  # first: another text, another model
        _check_same_model(saved, model_config, saved_path)
        model = saved.build_model(saved_path)
    else:
        model = GPT(model_config)
    model.to(device)
    optimizer = make_optimizer(model, t, device)
    step_model = torch.compile(model) if t.compile else model
    step_model = ranks.wrap(step_model)  # DistributedDataParallel when there are several ranks
    splits = {
        name: Batches(ids, model_config.block_size, t.batch_size, device)
        for name, ids in (("train", corpus.train), ("val", corpus.val))
    }
    generator = torch.Generator().manual_seed(t.seed + ranks.rank)  # each rank its own batches
    return Setup(config, ranks, corpus, model, step_model, optimizer, precision, splits, generator)


def _check_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Every moment estimate has its parameter's shape: load_state_dict does not check, and a
    mismatch would only fail inside the first step."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            for name, value in optimizer.state.get(p, {}).items():
                if torch.is_tensor(value) and value.dim() and value.shape != p.shape:
                    shapes = f"{tuple(value.shape)} for a parameter of {tuple(p.shape)}"
                    raise ValueError(f"its {name} is {shapes}")


def _needed(state: Any, name: str) -> Any:
    """A last.pt's optimizer or random states, which a best.pt (or a file edited by hand) lacks."""
    if state is None:
        raise KeyError(name)  # said as "no 'name'" by restore
    return state


def _check_same_text(saved: Checkpoint, corpus: Corpus, config: RunConfig, path: Path, ranks: Ranks) -> None:
    """The corpus is the text the run trained on: its vocabulary, then its digest (ids as split). Another
    text (one that gained, lost or swapped characters, or was edited; or split by another val_fraction)
    would be trained on under the first one's ids, and its losses compared with the first one's best."""
    now, trained_on = corpus.tokenizer.chars, saved.chars
    if now != trained_on:
        new, gone = [c for c in now if c not in trained_on], [c for c in trained_on if c not in now]
        change = "; ".join(
            f"{what} {', '.join(repr(c) for c in chars[:5])}{' …' if len(chars) > 5 else ''}"
            for what, chars in (("new", new), ("gone", gone))
            if chars
        )
        raise UserError(
            f"--resume: the corpus {corpus.path} changed since {path} was trained on it: its vocabulary "
            f"went from {len(trained_on)} to {len(now)} characters ({change}); {OTHER_TEXT}"
        )
    if saved.corpus_digest is None:  # saved before checkpoints recorded it (format version 2)
        if ranks.is_main:
            print(
                f"note: {shown(path)} does not record which text it was trained on (saved by an older "
                f"tinygpt); resuming without checking that {shown(corpus.path)} is that text",
                file=sys.stderr,
            )
        return
    if saved.corpus_digest == corpus.digest:
        return
    was = (saved.run_section("data") or {}).get("val_fraction", config.data.val_fraction)
    if was != config.data.val_fraction:
        raise UserError(
            f"--resume: the run held out data.val_fraction = {was:g} of its corpus for validation, the "
            f"config says {config.data.val_fraction:g}, which would measure its losses on other text; "
            f"resume with --set data.val_fraction={was:g}"
        )
    raise UserError(
        f"--resume: {corpus.path} is not the text {path} was trained on (the same characters, other "
        f"contents: the file was edited, or data.corpus names another); {OTHER_TEXT}"
    )


def _check_same_model(saved: Checkpoint, model_config: GPTConfig, path: Path | None) -> None:
    config = vars(model_config)
    if saved.model_config != config:
        keys = [k for k in config if saved.model_config.get(k) != config[k]]
        differ = ", ".join(
            f"model.{k}: {saved.model_config.get(k)} in the run, {config[k]} in the config" for k in keys
        )
        raise UserError(
            f"--resume: the config's model differs from the one in {path} ({differ}); "
            "resume with the run's own config.yaml"
        )
