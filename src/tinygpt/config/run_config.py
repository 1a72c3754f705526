"""The run config: plain dataclasses, read from YAML, with dotted overrides, checked before any work.

A config file has three sections and the run directory:

    model: {n_layer: 6, n_head: 6, n_embd: 384, block_size: 256, dropout: 0.2, bias: true}
    data:  {corpus: shakespeare, val_fraction: 0.1}
    train: {batch_size: 64, max_iters: 5000, learning_rate: 1.0e-3, ...}
    out_dir: checkpoints/shakespeare_char

Every field below carries its help text and its allowed values; `load_config`
checks each one and raises `UserError` with one line naming the key, the value
and what is allowed.
"""

import dataclasses
import difflib
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tinygpt.config.checks import check_value, describe
from tinygpt.config.yaml_file import read_yaml
from tinygpt.errors import UserError

DEVICES = ("auto", "cpu", "cuda", "mps")  # the one list: train.device, sample --device, bench


def _shipped_configs_directory() -> Path:
    """Where the configs that come with tinygpt are: the checkout's top-level configs/, which an
    installed wheel carries as the package data tinygpt/configs/ (pyproject.toml maps one onto the other)."""
    package = Path(__file__).resolve().parents[1]  # tinygpt/
    installed = package / "configs"
    return installed if installed.is_dir() else package.parents[1] / "configs"


SHIPPED_CONFIGS = _shipped_configs_directory()


def setting(
    default: Any,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    choices: tuple = (),
) -> Any:
    """A config field with its help text and allowed range (low/high inclusive unless *_open)."""
    meta = dict(help=help, low=low, high=high, low_open=low_open, high_open=high_open, choices=choices)
    if isinstance(default, list):  # a mutable default needs a factory
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ModelSection:
    n_layer: int = setting(6, "transformer blocks", low=1)
    n_head: int = setting(6, "attention heads per block; must divide n_embd", low=1)
    n_embd: int = setting(384, "width of the residual stream", low=1)
    block_size: int = setting(
        256,
        "context length in characters; at least 4: the head views score induction on a string written "
        "twice, and a copy needs 2 characters",
        low=4,
    )
    dropout: float = setting(0.2, "dropout probability", low=0.0, high=1.0, high_open=True)
    attention_dropout: bool = setting(
        True,
        "dropout on the attention weights too; false: on the embeddings and residual branches only, which "
        "lets torch's fused attention kernel train (about 1.15x faster steps on a CPU)",
    )
    bias: bool = setting(True, "biases in linear layers and layer norms (GPT-2: true)")
    mlp: bool = setting(True, "an MLP in every block; false: attention-only blocks (docs/circuits.md)")


@dataclass
class DataSection:
    corpus: str = setting(
        "shakespeare",
        "`shakespeare` or `induction` (built in, made on first use) or a path to a UTF-8 text file",
    )
    data_dir: str = setting("data", "where the built-in corpus is written")
    val_fraction: float = setting(
        0.1,
        "share of the corpus, from its end, held out for validation",
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
    )


@dataclass
class TrainSection:
    batch_size: int = setting(64, "sequences per micro-batch", low=1)
    grad_accum_steps: int = setting(1, "micro-batches per optimizer step", low=1)
    max_iters: int = setting(5000, "optimizer steps", low=1)
    max_minutes: float = setting(
        0.0,
        "a time budget: max_iters is fitted as the run goes to the steps that fit into this many minutes "
        "(evaluations included), so that the decay ends then; max_iters stays the most; 0: none",
        low=0.0,
    )
    learning_rate: float = setting(1e-3, "peak learning rate", low=0.0, low_open=True)
    min_lr: float = setting(1e-4, "learning rate at the end of the decay", low=0.0)
    warmup_iters: int = setting(100, "steps of linear warm-up from 0", low=0)
    lr_schedule: str = setting(
        "cosine",
        "after the warm-up: cosine (a cosine decay to min_lr over the remaining steps) or wsd (constant, "
        "then a linear decay to min_lr over the last decay_fraction of the steps)",
        choices=("cosine", "wsd"),
    )
    decay_fraction: float = setting(
        0.3, "wsd: the share of max_iters spent decaying", low=0.0, high=1.0, low_open=True
    )
    optimizer: str = setting(
        "adamw",
        "adamw; or muon: Muon for the blocks' matrices (torch's; on a CPU computing in float32 or a "
        "torch < 2.9, tinygpt's float32 one), AdamW for the rest",
        choices=("adamw", "muon"),
    )
    weight_decay: float = setting(0.1, "weight decay, on 2-D weights only", low=0.0)
    betas: list[float] = setting([0.9, 0.99], "AdamW betas [beta1, beta2], each in [0, 1)")
    grad_clip: float = setting(1.0, "clip the gradient norm to this; 0 turns clipping off", low=0.0)
    eval_interval: int = setting(250, "steps between evaluations and checkpoints", low=1)
    eval_iters: int = setting(200, "batches per split in each evaluation", low=1)
    log_interval: int = setting(10, "steps between progress-bar updates of loss and speed", low=1)
    seed: int = setting(1337, "seed for initialisation, batches and dropout", low=0, high=2**32 - 1)
    device: str = setting("auto", "where to train", choices=DEVICES)
    dtype: str = setting(
        "auto",
        "training precision (autocast for the 16-bit ones); auto: bfloat16 where the device multiplies "
        "it natively, float16 on pre-Ampere CUDA GPUs, else float32",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    compile: bool = setting(False, "torch.compile the model")
    threads: int | str = setting(
        "auto",
        "CPU threads for torch, at most the CPUs this process can use; auto: of the counts that fit in the "
        "cores no other process is running on, the one whose steps are fastest, measured over the first "
        "steps and again when the step time drifts or the idle cores change (OMP_NUM_THREADS or "
        "MKL_NUM_THREADS pin it; under torchrun each rank keeps torch's)",
        low=1,
    )
    tensorboard: bool = setting(
        False, "also log each evaluation to TensorBoard, in <out_dir>/tensorboard (extra: tensorboard)"
    )
    wandb: bool = setting(False, "also log each evaluation to Weights & Biases (extra: wandb)")
    wandb_project: str = setting("tinygpt", "the W&B project of the run")
    wandb_run_name: str = setting("", "the W&B run's name (default: out_dir's last part)")
    timeline: bool = setting(True, "at each evaluation, append a snapshot of every head to timeline.jsonl")
    timeline_probe: str = setting(
        "",
        "the text the timeline records attention on (default: 48 validation characters from a line start)",
    )


@dataclass
class RunConfig:
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    train: TrainSection = field(default_factory=TrainSection)
    out_dir: str = setting("", "run directory (default: checkpoints/<config file name>)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SECTIONS = {"model": ModelSection, "data": DataSection, "train": TrainSection}


def load_config(path: str | Path, overrides: list[str] = ()) -> RunConfig:
    """Read a YAML config, apply `section.key=value` overrides, check everything; or raise UserError.

    A mistake in the file names the file; one in an override names the `--set` it came from.
    """
    path = config_path(path)
    if path.suffix == ".py" and path.is_file():  # YAML would read nanoGPT's `key = value` lines as one string
        raise UserError(
            f"config file {path} is Python, as nanoGPT's configs are; tinygpt's are YAML (section: {{key: "
            f"value}}): {SHIPPED_CONFIGS / 'shakespeare_char.yaml'} is nanoGPT's shakespeare_char recipe, "
            "and docs/usage.md's configuration reference lists every key"
        )
    raw = read_yaml(path, shipped_configs())
    if raw is None or raw == {}:
        raise UserError(
            f"config file {path} is empty: a config must at least say what it trains "
            f"(its model, data and train sections); start from a copy of {SHIPPED_CONFIGS / 'cpu.yaml'}"
        )
    for override in overrides:
        _apply_override(raw, override)
    config = from_dict(raw, source=str(path), overrides=overrides)
    if not config.out_dir:
        config.out_dir = str(Path("checkpoints") / path.stem)
    return config


def shipped_configs() -> list[str]:
    """The names of the configs that come with tinygpt: cpu, cpu_quick, …"""
    return sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml"))


def config_path(given: str | Path) -> Path:
    """The file a --config names: the path itself if it exists, else a shipped config.

    A shipped config answers to its name (`cpu`), its file name (`cpu.yaml`) and
    `configs/cpu.yaml`, the path the README uses, from any directory.
    """
    path = Path(given)
    with suppress(OSError):  # a name too long: reading it says so
        if path.exists():
            return path
    bare = len(path.parts) == 1 and path.suffix in ("", ".yaml")
    in_configs = path.parent == Path("configs") and path.suffix == ".yaml"
    name = path.name.removesuffix(".yaml")
    if (bare or in_configs) and name in shipped_configs():
        return SHIPPED_CONFIGS / f"{name}.yaml"
    return path


def from_dict(raw: Any, source: str = "config", overrides: list[str] = ()) -> RunConfig:
    """Build a checked RunConfig from plain data (as YAML gives it).

    `source` names where the values came from in messages; a rule that involves several keys names
    the `overrides` (`section.key=value`, applied to `raw` already) that set any of them, else `source`.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(
            f"{source}: the top level must be a mapping of sections "
            f"(model, data, train, out_dir), not {_kind(raw)}"
        )
    top_keys = [*SECTIONS, "out_dir"]
    for key in raw:
        _check_known(key, top_keys, source, "")
    sections = {}
    for name, cls in SECTIONS.items():
        values = raw.get(name)
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise UserError(
                f"{source}: section '{name}' must be a mapping of keys to values, not {_kind(values)}"
            )
        sections[name] = _build_section(cls, values, name, source)
    out_dir = raw.get("out_dir") or ""
    if not isinstance(out_dir, str):
        raise UserError(f"{source}: out_dir must be a path (a string), not {_kind(out_dir)}")
    config = RunConfig(**sections, out_dir=out_dir)
    _check_together(config, source, overrides)
    return config


def _apply_override(raw: Any, override: str) -> None:
    """Set one `section.key=value` in the file's raw data, checked first, so a mistake names the --set."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {override!r}: write it as section.key=value, e.g. --set train.max_iters=200")
    if "\n" in override or "\r" in override:  # YAML would fold it into a space, silently
        raise UserError(f"--set {override!r}: holds a line break; give the key and value on one line")
    parts = key.strip().split(".")
    if len(parts) > 2:
        raise UserError(
            f"--set {override!r}: keys have at most two parts, section.key (e.g. train.learning_rate)"
        )
    value = _override_value(parts, text, f"--set {override}")
    if not isinstance(raw, dict):
        return  # from_dict reports the malformed file itself
    if len(parts) == 1:
        raw[parts[0]] = value
        return
    section = raw.setdefault(parts[0], {})
    if section is None:
        section = raw[parts[0]] = {}
    if isinstance(section, dict):
        section[parts[1]] = value


def _override_value(parts: list[str], text: str, source: str) -> Any:
    """The value an override gives its key, read as YAML; a wrong key or value names `source`."""
    _check_known(parts[0], [*SECTIONS, "out_dir"], source, "")
    if parts[0] == "out_dir":
        if len(parts) == 2:
            raise UserError(f"{source}: out_dir is a path, not a section; write --set out_dir=PATH")
        return text  # a path, exactly as typed
    fields = {f.name: f for f in dataclasses.fields(SECTIONS[parts[0]])}
    if len(parts) == 1:
        example = f"{parts[0]}.{next(iter(fields))}"
        raise UserError(f"{source}: {parts[0]} is a section; set one of its keys, e.g. --set {example}=…")
    _check_known(parts[1], list(fields), source, parts[0] + ".")
    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError):  # not YAML: keep it as the text it is
        value = text
    check_value(fields[parts[1]], value, ".".join(parts), source)
    return value


def _build_section(cls: type, values: dict, section: str, source: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in values:
        _check_known(key, list(fields), source, section + ".")
    checked = {k: check_value(fields[k], v, f"{section}.{k}", source) for k, v in values.items()}
    return cls(**checked)


# Names other GPT code uses (nanoGPT's train.py globals and config files, common short forms) for
# tinygpt's keys, so that a habit gets the key it meant: `lr` is train.learning_rate, not train.min_lr.
ALIASES = {
    "lr": "train.learning_rate",
    "learning_rate": "train.learning_rate",
    "iters": "train.max_iters",
    "max_iters": "train.max_iters",
    "n_iters": "train.max_iters",
    "steps": "train.max_iters",
    "max_steps": "train.max_iters",
    "lr_decay_iters": "train.max_iters",  # tinygpt decays over the whole run, to max_iters
    "batch_size": "train.batch_size",
    "gradient_accumulation_steps": "train.grad_accum_steps",
    "grad_accum": "train.grad_accum_steps",
    "accumulation_steps": "train.grad_accum_steps",
    "eval_interval": "train.eval_interval",
    "eval_iters": "train.eval_iters",
    "log_interval": "train.log_interval",
    "warmup_iters": "train.warmup_iters",
    "warmup_steps": "train.warmup_iters",
    "min_lr": "train.min_lr",
    "weight_decay": "train.weight_decay",
    "wd": "train.weight_decay",
    "beta1": "train.betas",
    "beta2": "train.betas",
    "grad_clip": "train.grad_clip",
    "decay_lr": "train.lr_schedule",
    "compile": "train.compile",
    "seed": "train.seed",
    "device": "train.device",
    "dtype": "train.dtype",
    "wandb_log": "train.wandb",
    "wandb_project": "train.wandb_project",
    "wandb_run_name": "train.wandb_run_name",
    "n_layer": "model.n_layer",
    "n_layers": "model.n_layer",
    "layers": "model.n_layer",
    "n_head": "model.n_head",
    "n_heads": "model.n_head",
    "heads": "model.n_head",
    "n_embd": "model.n_embd",
    "n_embed": "model.n_embd",
    "d_model": "model.n_embd",
    "hidden_size": "model.n_embd",
    "block_size": "model.block_size",
    "context_length": "model.block_size",
    "seq_len": "model.block_size",
    "dropout": "model.dropout",
    "bias": "model.bias",
    "dataset": "data.corpus",
    "corpus": "data.corpus",
    "data_dir": "data.data_dir",
    "val_fraction": "data.val_fraction",
}


# nanoGPT's settings that tinygpt has no key for, and what does their work here
VOCABULARY = "the vocabulary is the corpus's own characters, counted when training starts: leave it out"
NO_KEY = {
    "vocab_size": VOCABULARY,
    "meta_vocab_size": VOCABULARY,
    "init_from": "a run starts from new weights; add --resume to continue one (nanoGPT's 'resume')",
    "eval_only": "to score a checkpoint without training, run tinygpt evaluate CHECKPOINT",
    "always_save_checkpoint": (
        "every evaluation saves last.pt, and best.pt when the validation loss is the lowest yet: leave it out"
    ),
    "backend": "under torchrun the device chooses (nccl on CUDA, gloo on a CPU): leave it out",
}


def key_for(name: str) -> str | None:
    """The dotted key a bare or misplaced name means (`max_iters`, `lr`, `n_embd`, `optimizer`), or None."""
    name = name.lower().replace("-", "_")
    if name == "out_dir":  # the one key outside the sections (nanoGPT keeps it beside its training keys)
        return name
    homes = [f"{section}.{name}" for section, cls in SECTIONS.items() if name in cls.__dataclass_fields__]
    return ALIASES.get(name) or (homes[0] if homes else None)


def _check_known(key: Any, valid: list[str], source: str, prefix: str) -> None:
    if key in valid:
        return
    meant = key_for(str(key))
    instead = NO_KEY.get(str(key).lower().replace("-", "_"))
    if instead is not None:
        hint = instead
    elif meant is not None:
        hint = f"did you mean '{meant}'?"
        if meant == "out_dir":
            hint = "out_dir stands alone, in no section: out_dir: PATH in the file, or --set out_dir=PATH"
        if meant == "train.betas":
            hint = "did you mean 'train.betas'? it holds [beta1, beta2] as a list: train.betas=[0.9, 0.95]"
    else:
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.5)
        hint = f"did you mean '{prefix}{close[0]}'?" if close else f"valid keys: {', '.join(valid)}"
    raise UserError(f"{source}: unknown key {prefix + str(key)!r}; {hint}")  # !r: quoted, escaped


def _divisors_near(n: int, wanted: int, reach: int = 10_000) -> list[int]:
    """The divisors of n closest to `wanted`, the one below and the one above (as there are), looked
    for within `reach` of it: n may be absurd (a damaged checkpoint's 2**70), and the hint stays quick."""
    top = min(wanted - 1, n)  # no divisor of n is above n
    below = [d for d in range(top, max(top - reach, 0), -1) if n % d == 0][:1]
    above = [d for d in range(wanted + 1, min(wanted + reach, n) + 1) if n % d == 0][:1]
    return below + above


def _named(source: str, overrides: list[str], *keys: str) -> str:
    """Where a rule's values came from: the --set options that set any of `keys`, else the file."""
    setting = [f"--set {o}" for o in overrides if o.partition("=")[0].strip() in keys]
    return " ".join(setting) or source


def _check_together(config: RunConfig, file: str, overrides: list[str]) -> None:
    """Rules that involve more than one key."""
    m, t = config.model, config.train
    if m.n_embd % m.n_head != 0:
        source = _named(file, overrides, "model.n_embd", "model.n_head")
        below = m.n_embd // m.n_head * m.n_head
        widths = " or ".join(str(w) for w in (below, below + m.n_head) if w > 0)
        heads = " or ".join(str(h) for h in _divisors_near(m.n_embd, m.n_head))
        divisor = f" or n_head as a divisor of n_embd (e.g. {heads})" if heads else ""
        raise UserError(
            f"{source}: model.n_embd = {m.n_embd} is not divisible by model.n_head = "
            f"{m.n_head}; pick n_embd as a multiple of n_head (e.g. {widths}){divisor}"
        )
    if t.min_lr > t.learning_rate:
        source = _named(file, overrides, "train.min_lr", "train.learning_rate")
        raise UserError(
            f"{source}: train.min_lr = {t.min_lr:g} is above train.learning_rate = "
            f"{t.learning_rate:g}; min_lr is where the decay ends and must be ≤ it"
        )
    if t.lr_schedule == "wsd" and t.warmup_iters > t.max_iters - decay_steps(t):
        keys = ("train.lr_schedule", "train.warmup_iters", "train.max_iters", "train.decay_fraction")
        source = _named(file, overrides, *keys)
        raise UserError(
            f"{source}: train.lr_schedule wsd decays over the last {decay_steps(t)} of {t.max_iters} steps "
            f"(decay_fraction {t.decay_fraction:g}), which overlaps the {t.warmup_iters} warm-up steps; "
            "lower train.warmup_iters or train.decay_fraction"
        )


def warnings_of(config: RunConfig) -> list[str]:
    """What a config allows but a user most likely did not mean: said before training, which goes on."""
    t, said = config.train, []
    if t.warmup_iters >= t.max_iters:
        reached = t.learning_rate * t.max_iters / (t.warmup_iters + 1)  # lr_at(max_iters - 1)
        said.append(
            f"train.warmup_iters = {t.warmup_iters} is not below train.max_iters = {t.max_iters}: the "
            f"learning rate only warms up, to {reached:.2e} of train.learning_rate's {t.learning_rate:.2e}, "
            "and never decays; lower train.warmup_iters (nanoGPT warms up for 2-10% of the steps)"
        )
    return said


def decay_steps(t: TrainSection) -> int:
    """wsd: how many of the last steps decay the learning rate (at least one)."""
    return max(1, round(t.decay_fraction * t.max_iters))


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__
    )


def reference() -> str:
    """A Markdown table of every key, its default and what it means (for the README)."""
    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            rows.append(f"| `{section}.{f.name}` | `{default}` | {describe(f)} | {f.metadata['help']} |")
    rows.append(
        f"| `out_dir` | `checkpoints/<config name>` | a path | "
        f"{RunConfig.__dataclass_fields__['out_dir'].metadata['help']} |"
    )
    return "\n".join(rows)
