"""Everything one training process needs before its first step, built the same way for
`tinygpt train` and `tinygpt bench`: precision, corpus, model, optimizer, batches, generator."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from tinygpt.config.run_config import RunConfig
from tinygpt.data.corpus import Batches, Corpus, load_corpus
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.model import GPT, GPTConfig
from tinygpt.threads import Threads, threads_for
from tinygpt.training.distributed import Ranks
from tinygpt.training.memory import check_fits
from tinygpt.training.optimizer import make_optimizer
from tinygpt.training.precision import Precision, check_compile_works, precision_for, prepare_device
from tinygpt.training.resume import resumed_model
from tinygpt.training.step import global_batch, lr_at, never, train_step


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
    threads: Threads  # the CPU threads each step runs on (tinygpt.threads): the loop steps through it

    @property
    def tokens_per_step(self) -> int:
        return global_batch(self.config.train, self.ranks) * self.config.model.block_size

    def step(self, step: int, abandon: Callable[[], bool] = never) -> tuple[torch.Tensor, torch.Tensor]:
        """Optimizer step `step` (from 0); returns the loss and the gradient norm, still on the device.
        Abandoned where `abandon()` says yes between its micro-batches (training/step.py)."""
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
            abandon=abandon,
        )

    def rng_state(self) -> dict[str, torch.Tensor]:
        """This rank's random states, as a checkpoint keeps them."""
        state = {"torch": torch.get_rng_state(), "batches": self.generator.get_state()}
        if self.ranks.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.ranks.device)
        return state

    def set_rng_state(self, state: dict[str, torch.Tensor]) -> None:
        """This rank's random states set to `state` (rng_state's)."""
        torch.set_rng_state(state["torch"])
        self.generator.set_state(state["batches"])
        if self.ranks.device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], self.ranks.device)


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
        model = resumed_model(saved, saved_path, corpus, config, model_config, ranks)
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
    # under torchrun a step waits for every rank's all-reduce: its time says little of this rank's threads
    torchrun = "under torchrun each rank keeps torch's threads" if ranks.distributed else None
    threads = threads_for(t.threads, "train.threads", device, torchrun)
    return Setup(config, ranks, corpus, model, step_model, optimizer, precision, splits, generator, threads)
