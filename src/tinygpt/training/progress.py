"""What a training run shows: the summary printed before the first step, and the progress bar (loss,
learning rate, tokens/s, MFU and the threads chosen; in a notebook, one bar redrawn in place). The
record --resume restores is in resume.py.
"""

import io
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from tinygpt.config.run_config import TrainSection, warnings_of
from tinygpt.errors import shown
from tinygpt.training.flops import MATMUL_SIZES, Utilisation, flops_per_token, matmul_peak
from tinygpt.training.precision import cpu_multiplies_bfloat16
from tinygpt.training.set_up import Setup
from tinygpt.training.step import global_batch

ABOVE_PEAK_NOTE = (
    "note: mfu shows 100%+ where the model computes faster than the matmul peak measured when the run "
    "started, which a busy machine measures low then; tinygpt bench measures the peak at several sizes"
)


class CellBar(tqdm):
    """tqdm in a notebook: one output the bar redraws in place (IPython's display id), where the terminal's
    bar, redrawn with '\r' on stderr, leaves an output per redraw in a saved notebook (about 500 for the
    tutorial's training). Plain text, so it needs no widgets."""

    def __init__(self, *args: Any, **kwargs: Any):
        from IPython.display import display  # in a notebook kernel, IPython is there

        self.cell = None if kwargs.get("disable") else display({"text/plain": ""}, raw=True, display_id=True)
        super().__init__(
            *args, file=io.StringIO(), ascii=False, **kwargs
        )  # StringIO has no encoding to go by

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if self.cell is not None:
            self.cell.update({"text/plain": self.__str__() if msg is None else msg}, raw=True)
        return True

    def clear(self, nolock: bool = False) -> None:  # nothing to clear: write() prints below the bar
        pass


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (as tqdm.autonotebook tells it), not a terminal's IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in shell.config


class Bar:
    """The training bar: a step at a time, and at each log interval the loss, the learning rate, and the
    tokens/s and MFU since the previous one. Closed however the loop ends (a with block)."""

    def __init__(self, setup: Setup, start_step: int, shown: bool):
        t = setup.config.train
        self.tqdm = (CellBar if in_notebook() else tqdm)(
            total=t.max_iters, initial=start_step, disable=not shown, unit="step", dynamic_ncols=True
        )
        self.utilisation = None if self.tqdm.disable else utilisation_of(setup)
        self.tokens_per_step = setup.tokens_per_step
        self.threads = setup.threads
        self.since, self.steps = time.perf_counter(), 0
        self.above_peak_said = False

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.tqdm.close()  # so that an error line starts on a line of its own

    def stepped(self) -> None:
        if not self.tqdm.disable and self.tqdm.desc:  # what held the bar (compiling) is over
            self.tqdm.set_description("", refresh=False)
        self.tqdm.update(1)
        self.steps += 1

    def show(self, loss: float, lr: float) -> None:
        """The figures of the log interval just ended."""
        now = time.perf_counter()
        speed = self.steps * self.tokens_per_step / (now - self.since)
        self.tqdm.set_postfix(
            loss=f"{loss:.4f}",
            lr=f"{lr:.2e}",
            tok_s=f"{speed:,.0f}",
            mfu=self.mfu(speed),
            threads=self.threads.shown,
        )
        self.since, self.steps = now, 0

    def mfu(self, tokens_per_s: float) -> str | None:
        """The share of the measured peak, at most 100%: above it, "100%+", said once why."""
        if self.utilisation is None:
            return None
        share = self.utilisation.of(tokens_per_s)
        if share <= 1:
            return f"{share:.1%}"
        if not self.above_peak_said:
            self.tqdm.write(ABOVE_PEAK_NOTE)
            self.above_peak_said = True
        return "100%+"


def utilisation_of(setup: Setup) -> Utilisation:
    """MFU as `tinygpt bench` computes it, for the progress bar, against a peak measured here in a
    second or two: at the smallest of bench's matmul sizes, so it can read a little above bench's."""
    device, dtype = setup.ranks.device, getattr(torch, setup.precision.dtype)
    quick = MATMUL_SIZES.get(device.type, MATMUL_SIZES["cpu"])[:1]
    peak = matmul_peak(device, dtype, quick, progress=False)["flops"] * setup.ranks.world_size
    return Utilisation(flops_per_token(setup.model), peak)


def steps_said(t: TrainSection) -> str:
    """How long the run trains: its steps, or its time budget and the most steps it may take."""
    if not t.max_minutes:
        return f"{t.max_iters} steps"
    return f"{t.max_minutes:g} minutes (train.max_minutes: max_iters fitted as it goes, ≤ {t.max_iters})"


def print_summary(setup: Setup, run_dir: Path, step: int) -> None:
    """What is about to be trained, where and how: printed once (by rank 0) before the first step."""
    model, corpus, ranks, t = setup.model, setup.corpus, setup.ranks, setup.config.train
    c, device, dtype = model.config, ranks.device, setup.precision.dtype
    print(
        f"model: {model.num_params() / 1e6:.2f}M parameters ({c.n_layer} layers, {c.n_head} heads, "
        f"{c.n_embd} wide, block {c.block_size})"
    )
    print(
        f"corpus: {shown(corpus.path)} ({len(corpus.train) + len(corpus.val):,} characters, "
        f"vocabulary {corpus.tokenizer.vocab_size})"
    )
    print(
        f"training: {steps_said(t)} of {global_batch(t, ranks)} × {c.block_size} tokens on {device} "
        f"({dtype}{' by train.dtype auto' if t.dtype == 'auto' else ''})"
        f"{f', resuming at step {step}' if step else ''}; run directory {shown(run_dir)}"
    )
    if device.type == "cpu":
        print(f"threads: {setup.threads.described()}")
    for warning in warnings_of(setup.config):  # the run goes on
        print(f"warning: {warning}", file=sys.stderr)
    if dtype == "bfloat16" and device.type == "cpu" and not cpu_multiplies_bfloat16():
        print(
            "note: this CPU has no bfloat16 instructions (AVX-512 BF16), so bfloat16 trains several times "
            "slower than float32 here; set train.dtype to auto or float32"
        )
    if ranks.distributed:
        print(
            f"distributed: {ranks.world_size} processes ({'nccl' if device.type == 'cuda' else 'gloo'}), "
            f"global batch {global_batch(t, ranks)} = {t.batch_size} per rank × {ranks.world_size} ranks "
            f"× {t.grad_accum_steps} accumulation steps"
        )
