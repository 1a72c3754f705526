"""TensorBoard and Weights & Biases: each evaluation, as metrics.jsonl logs it, in the tools people use.

Each switch (train.tensorboard, train.wandb) needs its package, an extra of
tinygpt's (`pip install 'tinygpt[tensorboard]'`, `'tinygpt[wandb]'`); a switch
whose package is missing is a UserError before any work starts. At every
evaluation the loop hands one `Evaluation` to `Loggers.log`, which hands it to
every logger switched on, before the same values go to metrics.jsonl:

    scalars   loss/train, loss/val, learning_rate (the metrics.jsonl entry's), and, over the
              steps since the previous evaluation, tokens_per_s and grad_norm (the last step's
              gradient norm, before clipping)
    sample    SAMPLE_LENGTH characters sampled at temperature SAMPLE_TEMPERATURE with a fixed
              seed, from the probe's first character
    attention the probe's attention weights, one image per layer, heads side by side
              (tinygpt.training.attention_image); the probe is the timeline's
              (train.timeline_probe, or validation text from a line start: tinygpt.files.snapshots)

Only rank 0 logs under torchrun. TensorBoard writes event files into
<run>/tensorboard (its own writer appends them, record by record, each with a
checksum); a resumed run purges what the run before it logged after the step it
resumes from (SummaryWriter's purge_step), so every step appears once. Logging
before metrics.jsonl keeps that true however a run dies: a step metrics.jsonl
holds, TensorBoard holds too. W&B keeps its files in <run>/wandb and the run's id
in <run>/wandb_id, so a resumed run continues the same W&B run; W&B cannot take
a step back, so it ignores a step below the last one it has (keeping the values a
run that died logged after its last checkpoint).
"""

import html
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from tinygpt.config.run_config import RunConfig, TrainSection
from tinygpt.errors import UserError
from tinygpt.files.atomic import write_atomic
from tinygpt.files.snapshots import probe_of
from tinygpt.generation.sampling import generate
from tinygpt.model import GPT, attention_weights
from tinygpt.tokenizer import CharTokenizer
from tinygpt.training.attention_image import attention_image

SAMPLE_LENGTH = 200  # characters sampled at each evaluation
SAMPLE_TEMPERATURE = 0.8
SAMPLE_SEED = 0
SCALARS = {  # an evaluation's value -> its name in the tools
    "train_loss": "loss/train",
    "val_loss": "loss/val",
    "lr": "learning_rate",
    "tokens_per_s": "tokens_per_s",
    "grad_norm": "grad_norm",
}


@dataclass
class Evaluation:
    """What one evaluation shows: its values, a sample, and the probe's attention in every layer."""

    step: int
    values: dict[str, float]  # keys of SCALARS; tokens_per_s and grad_norm absent at a run's first
    sample: str
    probe: str
    attention: list[torch.Tensor]  # per layer, (nh, T, T) on the probe


class Logger(Protocol):
    def log(self, evaluation: Evaluation) -> None: ...

    def close(self, failed: bool) -> None: ...


LOGGERS = ("tensorboard", "wandb")  # each one's switch (train.<name>), Python package and tinygpt extra


def check_packages(t: TrainSection) -> None:
    """A UserError naming the extra to install for a switched-on logger whose package is missing."""
    for name in LOGGERS:
        if not getattr(t, name):
            continue
        try:
            __import__(name)
        except ImportError:
            raise UserError(
                f"train.{name} is true, but the Python package {name} is not installed: "
                f"pip install 'tinygpt[{name}]' (from a checkout: pip install -e '.[{name}]'), "
                f"or set train.{name}: false"
            ) from None


class Loggers:
    """Every logger the config switches on. A context manager: leaving closes them.

    Made before any work (it checks the packages); `start` opens the loggers on
    the process that writes the run directory.
    """

    def __init__(self, config: RunConfig):
        check_packages(config.train)
        self.config = config
        self.active: list[Logger] = []

    def __enter__(self) -> "Loggers":
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        for logger in self.active:
            logger.close(failed=kind is not None)
        self.active = []

    def start(self, run_path: Path, first_step: int, resumed: bool) -> None:
        """Open the loggers for a run whose first evaluation here is at first_step."""
        t = self.config.train
        if t.tensorboard:
            self.active.append(TensorBoardLogger(run_path / "tensorboard", first_step if resumed else None))
        if t.wandb:
            self.active.append(WandbLogger(run_path, self.config))

    def log(self, step: int, values: dict[str, Any], model: GPT, tokenizer: CharTokenizer, val: torch.Tensor):
        """Hand this evaluation to every logger; the sample and pictures are made only if one is on."""
        if not self.active:
            return
        scalars = {k: float(v) for k, v in values.items() if k in SCALARS and v is not None}
        probe = probe_of(tokenizer, val, model.config.block_size, self.config.train.timeline_probe)
        probe_ids = probe.view(1, -1)  # (1, T): the timeline's probe
        sample_ids, attention = evaluation_views(model, probe_ids)
        evaluation = Evaluation(
            step,
            scalars,
            tokenizer.decode(sample_ids),
            tokenizer.decode(probe_ids[0].tolist()),
            attention,
        )
        for logger in self.active:
            logger.log(evaluation)


@torch.no_grad()
def evaluation_views(model: GPT, probe_ids: torch.Tensor) -> tuple[list[int], list[torch.Tensor]]:
    """A seeded sample from the probe's first character, and every layer's attention on the probe.

    The model's own generator keeps the run's random state untouched, so a run
    logs the same losses with loggers on as off; the model is left in the mode it was in.
    """
    training = model.training
    device = model.wte.weight.device
    probe_ids = probe_ids.to(device)
    generator = torch.Generator(device=device).manual_seed(SAMPLE_SEED)
    model.eval()
    try:
        out = generate(
            model, probe_ids[:, :1], SAMPLE_LENGTH - 1, temperature=SAMPLE_TEMPERATURE, generator=generator
        )
        attention = [w[0].cpu() for w in attention_weights(model, probe_ids)]  # each (nh, T, T)
    finally:
        model.train(training)
    return out[0].tolist(), attention


class TensorBoardLogger:
    """Event files in a directory, read by `tensorboard --logdir`."""

    def __init__(self, directory: Path, purge_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory), purge_step=purge_step)

    def log(self, e: Evaluation) -> None:
        for key, value in e.values.items():
            self.writer.add_scalar(SCALARS[key], value, e.step)
        self.writer.add_text("sample", markdown_code(e.sample), e.step)
        for layer, weights in enumerate(e.attention):
            self.writer.add_image(f"attention/layer_{layer}", attention_image(weights), e.step)
        self.writer.add_text("probe", markdown_code(e.probe), e.step)
        self.writer.flush()  # on disk before metrics.jsonl has the step

    def close(self, failed: bool) -> None:
        self.writer.close()


def markdown_code(text: str) -> str:
    """Text as a Markdown code block (TensorBoard renders text as Markdown): every line indented by 4."""
    return "\n".join("    " + line for line in text.split("\n"))


class WandbLogger:
    """A Weights & Biases run, continued by a resumed training run (its id is kept in the run directory)."""

    def __init__(self, run_path: Path, config: RunConfig):
        import wandb

        self.wandb = wandb
        t = config.train
        id_file = run_path / "wandb_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(8)
        write_atomic(id_file, run_id + "\n")
        try:
            self.run = wandb.init(
                project=t.wandb_project,
                name=t.wandb_run_name or run_path.name,
                id=run_id,
                resume="allow",
                dir=str(run_path),
                config=config.to_dict(),
                settings=wandb.Settings(console="off"),  # tqdm and tinygpt's own lines stay as they are
            )
        except wandb.errors.Error as e:  # no login, no network, …: W&B's own words, then what to do
            raise UserError(
                f"train.wandb is true, but W&B could not start a run ({e}); run `wandb login`, or set "
                "WANDB_MODE=offline to keep the run on disk (wandb sync uploads it later)"
            ) from None

    def log(self, e: Evaluation) -> None:
        row: dict[str, Any] = {SCALARS[key]: value for key, value in e.values.items()}
        row["sample"] = self.wandb.Html(f"<pre>{html.escape(e.sample)}</pre>")
        for layer, weights in enumerate(e.attention):
            row[f"attention/layer_{layer}"] = self.wandb.Image(
                attention_image(weights).permute(1, 2, 0).numpy()
            )
        self.run.log(row, step=e.step)

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)
