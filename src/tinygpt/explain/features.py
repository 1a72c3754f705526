"""`tinygpt features`: a dictionary of one layer's features, trained on the run's own training text.

The activations at one hook point (`blocks.L.mlp_out`: what layer L's MLP adds to the stream, or
`blocks.L.resid_post`: the stream leaving block L) are streamed from random windows of the run's
training split, a few batches at a time with their rows shuffled together (so that one batch is not
a handful of neighbouring windows), into a TopK dictionary (tinygpt.explain.dictionary). Then it is
scored on the validation split (tinygpt.explain.feature_quality) and each feature described
(tinygpt.explain.feature_notes), and all of it is saved in one feature file (tinygpt.files.feature_file).

A control dictionary is trained the same way, on the same windows, on the run's step-0 weights,
rebuilt exactly as training built them (`torch.manual_seed(train.seed + rank 0)`, then `GPT(config)`,
tinygpt.training.set_up.set_up): what a dictionary of an untrained model finds is what training did
not add. Its quality and its descriptions' precision sit beside the trained one's.

The defaults fit the README's model (configs/cpu.yaml, 4 layers × 128): 8 latents per number of the
layer's width, k 16, 600,000 positions in batches of 1,024 (dictionary.py's tuned batch).
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from tqdm import tqdm

from tinygpt.config.run_config import TrainSection
from tinygpt.device import GiB, free_memory
from tinygpt.errors import UserError
from tinygpt.explain.dictionary import TopKDictionary, train_dictionary
from tinygpt.explain.feature_notes import describe_features, description_precision
from tinygpt.explain.feature_quality import assess, evaluation_windows, up_to
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.files.feature_file import FeatureFile, model_digest
from tinygpt.model import GPT, GPTConfig

SITES = ("mlp_out", "resid_post")
DEFAULT_LAYER = 1  # past the first block, where features of more than the character itself appear
WIDTHS = 8  # latents per number of the layer's width
K = 16
POSITIONS = 600_000
MOST_POSITIONS = 10**9  # a million steps of BATCH: beyond it a typo (a run of days), not a request
BATCH = 1024
BUFFER = 8  # batches drawn from one forward pass, their rows shuffled together
CONTROL_DESCRIBED = 128  # control features described, for the precision it is compared on
SEED = TrainSection.__dataclass_fields__["seed"].metadata


@dataclass(frozen=True)
class Options:
    """What `tinygpt features` was asked for, checked against the model by `checked`."""

    layer: int | None = None  # None: DEFAULT_LAYER, or the last layer of a model with fewer
    site: str = SITES[0]
    size: int | None = None  # latents; None: WIDTHS × the layer's width
    k: int = K
    seed: int = 0
    positions: int = POSITIONS
    batch: int = BATCH

    def checked(self, config: GPTConfig) -> "Options":
        """These options with the size filled in; a value the model cannot take is one UserError."""
        if self.site not in SITES:
            raise UserError(f"--site {self.site!r}: use one of {', '.join(SITES)}")
        if self.site == "mlp_out" and not config.mlp:
            raise UserError(
                "this model is attention-only (model.mlp: false): it has no mlp_out; "
                "train a dictionary of the residual stream with --site resid_post"
            )
        layer = min(DEFAULT_LAYER, config.n_layer - 1) if self.layer is None else self.layer
        if not 0 <= layer < config.n_layer:
            raise UserError(
                f"--layer {layer} does not exist: this model has {config.n_layer} layers "
                f"(0 … {config.n_layer - 1}); pass one of them, or --layer all"
            )
        size = WIDTHS * config.n_embd if self.size is None else self.size
        for option, value in (("--size", size), ("--k", self.k), ("--positions", self.positions)):
            if value < 1:
                raise UserError(f"{option} {value} is below 1; use 1 or more")
        if self.positions > MOST_POSITIONS:
            raise UserError(
                f"--positions {self.positions:,} would take a million steps and more; use at most "
                f"{MOST_POSITIONS:,} (the default is {POSITIONS:,})"
            )
        if self.k > size:
            raise UserError(
                f"--k {self.k} is more than the dictionary's {size} latents (--size); use at most {size}"
            )
        if not SEED["low"] <= self.seed <= SEED["high"]:
            raise UserError(f"--seed {self.seed} is not allowed; use an integer ≥ 0 and ≤ {SEED['high']}")
        return Options(layer, self.site, size, self.k, self.seed, self.positions, self.batch)

    def check_fits(self, width: int, device: torch.device) -> None:
        """Raise UserError when training this dictionary (size filled in) of a layer `width` wide could not
        fit in the device's free memory; nothing is checked where that is unknown."""
        free = free_memory(device)
        need = dictionary_bytes(self.size, width, self.batch)
        if free is not None and need > free:
            raise UserError(
                f"--size {self.size:,} is too large to train here: a dictionary of {self.size:,} latents of "
                f"a layer {width} wide needs at least {need / GiB:,.1f} GiB, and {device.type} has "
                f"{free / GiB:,.1f} GiB free; leave --size out ({WIDTHS} × the width: "
                f"{WIDTHS * width:,}) or make it smaller"
            )

    @property
    def hook(self) -> str:
        return f"blocks.{self.layer}.{self.site}"


def dictionary_bytes(size: int, width: int, batch: int) -> int:
    """A lower bound on the memory training a dictionary holds at once, in bytes: its encoder and decoder
    (size × width each) with their gradients and Adam's two moments, float32, while the first
    dictionary's weights wait beside the control's; and a batch's pre-activations and their gradient."""
    weights = 2 * size * width  # encoder and decoder, 4 bytes each
    trained = weights * 4 * 4  # weight, gradient, Adam's exp_avg and exp_avg_sq
    kept = weights * 4  # the first dictionary's weights while the control trains
    latents = 2 * batch * size * 4  # a batch's pre-activations and their gradient
    return trained + kept + latents


def step_zero_model(checkpoint: Checkpoint) -> GPT:
    """The run's weights before its first step, rebuilt as training built them (rank 0's seed), in eval
    mode; the global random state is left as it was."""
    seed = (checkpoint.run_section("train") or {}).get(
        "seed", TrainSection.__dataclass_fields__["seed"].default
    )
    fields = GPTConfig.__dataclass_fields__
    config = GPTConfig(**{k: v for k, v in checkpoint.model_config.items() if k in fields})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # tinygpt.training.set_up.set_up: torch.manual_seed(t.seed + ranks.rank)
        return GPT(config).eval()


def activation_batches(
    model: GPT, ids: torch.Tensor, hook: str, positions: int, batch: int, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """`positions` activation rows at `hook` on random windows of ids, in batches (batch, d) (the last one
    may be shorter); each forward pass (stopping after the hook's block) fills BUFFER batches, their rows
    shuffled together."""
    T = model.config.block_size
    device = model.wte.weight.device
    offsets = torch.arange(T)  # (T,)
    left = positions
    while left > 0:
        rows = min(left, batch * BUFFER)
        starts = torch.randint(len(ids) - T + 1, (math.ceil(rows / T),), generator=generator)  # (W,)
        windows = ids[starts.unsqueeze(1) + offsets].long().to(device)  # (W, T)
        acts = up_to(model, hook, windows)[0].flatten(0, 1)  # (W·T, d)
        acts = acts[torch.randperm(acts.size(0), generator=generator)[:rows].to(device)]  # (rows, d)
        left -= rows
        yield from acts.float().split(batch)


def train_on(
    model: GPT, ids: torch.Tensor, options: Options, bar: tqdm | None
) -> tuple[TopKDictionary, dict]:
    """A dictionary of `options.hook` on the model, from `options.positions` rows of ids; its record."""
    generator = torch.Generator().manual_seed(options.seed)  # the same windows for the model and the control
    steps = math.ceil(options.positions / options.batch)
    batches = activation_batches(model, ids, options.hook, options.positions, options.batch, generator)
    progress = bar.update if bar is not None else None
    dictionary, record = train_dictionary(
        batches, model.config.n_embd, options.size, options.k, steps, seed=options.seed, progress=progress
    )
    return dictionary, {**record, "positions": options.positions, "batch": options.batch}


def make_features(
    checkpoint: Checkpoint,
    model: GPT,
    train_ids: torch.Tensor,
    val_ids: torch.Tensor,
    options: Options,
    progress: bool = True,
) -> FeatureFile:
    """One hook point's feature file: the dictionary, its quality and the control's, its features described.

    train_ids, val_ids: the run's splits (tinygpt.explain.validation.corpus_of).
    """
    model.eval()
    steps = math.ceil(options.positions / options.batch)
    x, y = evaluation_windows(val_ids, model.config.block_size)
    text = "".join(checkpoint.chars[i] for i in x.flatten().tolist())
    control = step_zero_model(checkpoint).to(model.wte.weight.device)
    with tqdm(total=2 * steps, desc=f"features of {options.hook}", unit="step", disable=not progress) as bar:
        dictionary, record = train_on(model, train_ids, options, bar)
        bar.set_description(f"control (step-0 weights) of {options.hook}")
        control_dictionary, control_record = train_on(control, train_ids, options, bar)
    found = assess(model, dictionary, options.hook, x, y)
    notes = describe_features(model, dictionary, found, text, checkpoint.chars, progress)
    baseline = assess(control, control_dictionary, options.hook, x, y)
    control_notes = describe_features(
        control, control_dictionary, baseline, text, checkpoint.chars, progress=False, only=CONTROL_DESCRIBED
    )
    record |= {"quality": found.summary | description_precision(notes)}
    record["control"] = {**control_record, "quality": baseline.summary | description_precision(control_notes)}
    return FeatureFile(
        layer=options.layer,
        site=options.site,
        W_enc=dictionary.W_enc.detach(),
        b_enc=dictionary.b_enc.detach(),
        W_dec=dictionary.W_dec.detach(),
        b_dec=dictionary.b_dec.detach(),
        k=dictionary.k,
        input_scale=dictionary.input_scale,
        model_digest=model_digest(checkpoint),
        record=record,
        features=notes,
    )


def dictionary_of(features: FeatureFile) -> TopKDictionary:
    """The TopK dictionary a feature file holds, in eval mode on the CPU."""
    n, d = features.W_dec.shape
    dictionary = TopKDictionary(d, n, features.k, features.input_scale)
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            getattr(dictionary, name).copy_(getattr(features, name))
    return dictionary.eval()
