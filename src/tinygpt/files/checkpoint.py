"""Checkpoints: a typed `Checkpoint`, saved as a dict of tensors and plain data, read without running code.

This module is the one place that knows the file's layout. In the file (format version 3),
every entry plain data, so that `torch.load(..., weights_only=True)` reads it:

    format_version   int: bumped when the layout changes (UPGRADES reads every older one)
    model_config     dict: GPTConfig's fields                          Checkpoint.model_config
    model            state_dict of the plain (uncompiled, unwrapped) model   .weights
    tokenizer        list of the vocabulary's characters, in id order        .chars
    config           the resolved run config, as a dict                      .config
    record           the training record (see tinygpt.training.loop): step, tokens_seen,
                     best_val_loss, best_step, wall_time_s, train_loss, val_loss, device,
                     dtype, torch_version, num_params, world_size, global_batch   .record
    optimizer        (last.pt only) the optimizer's state_dict, for --resume     .optimizer
    rng              (last.pt only) each rank's random states, rank 0 first:
                     [{"torch", "batches", and "cuda" on CUDA}, ...]            .rng
    corpus_digest    sha256 of the corpus's ids, split as trained on (tinygpt.data.corpus.Corpus.digest):
                     --resume checks the corpus is still that text            .corpus_digest
    digest           sha256 of everything above, added by `save_checkpoint` (see tinygpt.files.integrity)

Version 1 (before the typed Checkpoint) kept rank 0's random states in `rng` (a dict) and,
for a run on several processes, every rank's in `rank_rng`; it is read as version 2. Version 2
had no corpus_digest (None: resumed without the check, and said so).

Reading checks a checkpoint as strictly as a config: the digest (when there is one: files
written before it existed have none), every key, the model's sizes against its tensors,
the vocabulary, the record, and that every weight is finite. Any problem is one UserError
naming the file; a file that passes builds its model without surprises.

To add an entry: a field of Checkpoint with a default (what an older file means), a line
above, and, if older files need more than the default, a step in UPGRADES with a new
FORMAT_VERSION.
"""

import dataclasses
import io
import math
import pickle
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tinygpt.config.run_config import ModelSection, from_dict
from tinygpt.errors import UserError, shown
from tinygpt.files.atomic import write_atomic
from tinygpt.files.integrity import OTHER_ADVICE, absent, digest, refusal, seal, seal_problem, unreadable
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer

FORMAT_VERSION = 3


@dataclass
class Checkpoint:
    """What a checkpoint holds, typed: `build_checkpoint` makes one, `read_checkpoint` returns one."""

    model_config: dict[str, Any]  # GPTConfig's fields (a key GPTConfig lacks is kept: export names it)
    weights: dict[str, torch.Tensor]  # state_dict of the plain model
    chars: list[str]  # the vocabulary, in id order
    config: dict[str, Any] | None = None  # the resolved run config (None: a checkpoint made without one)
    record: dict[str, Any] = field(default_factory=dict)  # the training record
    optimizer: dict[str, Any] | None = None  # last.pt: the optimizer's state_dict
    rng: list[dict[str, torch.Tensor]] | None = None  # last.pt: each rank's random states, rank 0 first
    corpus_digest: str | None = None  # the text trained on (None: saved before version 3 recorded it)
    format_version: int = FORMAT_VERSION  # the version the file was written in (read as this one)

    @property
    def tokenizer(self) -> CharTokenizer:
        return CharTokenizer(self.chars)

    @property
    def step(self) -> int | None:
        """The step the model was saved at (None for a checkpoint without a training record)."""
        return self.record.get("step")

    def run_section(self, section: str) -> dict[str, Any] | None:
        """One section of the run config (train, data, model) as saved; None where there is none."""
        found = (self.config or {}).get(section)
        return found if isinstance(found, dict) else None

    def build_model(self, path: Path | str = "checkpoint") -> GPT:
        """The model with these weights (train mode, on the CPU); a mismatch is a UserError naming path."""
        try:
            model = GPT(GPTConfig(**self.model_config))
            model.load_state_dict(self.weights)
        except (TypeError, RuntimeError, KeyError, AssertionError) as e:
            raise UserError(f"checkpoint {path} does not hold a matching model ({_first_line(e)})") from None
        return model

    def to_payload(self) -> dict[str, Any]:
        """The dict the file holds (the layout above), without its digest."""
        payload = {_KEYS.get(f.name, f.name): getattr(self, f.name) for f in dataclasses.fields(self)}
        payload["format_version"] = FORMAT_VERSION
        return {key: value for key, value in payload.items() if value is not None}


_KEYS = {"weights": "model", "chars": "tokenizer"}  # a field and its entry in the file, where they differ
_FIELDS = {_KEYS.get(f.name, f.name): f.name for f in dataclasses.fields(Checkpoint)}  # entry -> field
REQUIRED_KEYS = ("format_version", "model_config", "model", "tokenizer")
KNOWN_KEYS = (*_FIELDS, "digest")
KNOWN_IN_2 = tuple(k for k in KNOWN_KEYS if k != "corpus_digest")
KNOWN_BEFORE = {1: (*KNOWN_IN_2, "rank_rng"), 2: KNOWN_IN_2}  # the entries of an older version


def _from_version_1(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept rank 0's random states in `rng` and every rank's in `rank_rng` (several ranks only)."""
    upgraded = {k: v for k, v in payload.items() if k not in ("rng", "rank_rng")}
    if "rank_rng" in payload:
        upgraded["rng"] = payload["rank_rng"]
    elif "rng" in payload:
        upgraded["rng"] = [payload["rng"]] if isinstance(payload["rng"], dict) else payload["rng"]
    return upgraded


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {  # version -> next
    1: _from_version_1,
    2: dict,  # version 3 added corpus_digest, which a version 2 file lacks: None
}


def upgraded(payload: dict[str, Any]) -> dict[str, Any]:
    """A checked payload of any version this tinygpt reads, in the current layout."""
    for version in range(payload["format_version"], FORMAT_VERSION):
        payload = UPGRADES[version](payload)
    return payload


def build_checkpoint(
    model: GPT,
    tokenizer: CharTokenizer,
    config: dict[str, Any],
    record: dict[str, Any],
    optimizer: dict[str, Any] | None = None,
    rank_rng: list[dict[str, torch.Tensor]] | None = None,
) -> Checkpoint:
    """A model's checkpoint as training saves it; last.pt's also holds the optimizer and every rank's RNG."""
    return Checkpoint(
        model_config=vars(model.config),
        weights=model.state_dict(),
        chars=tokenizer.chars,
        config=config,
        record=record,
        optimizer=optimizer,
        rng=rank_rng,
    )


def save_checkpoint(checkpoint: Checkpoint, path: str | Path) -> None:
    """Write the checkpoint to path so that path always holds either the old file or the whole new one."""
    write_payload(checkpoint.to_payload(), path)


def write_payload(payload: dict[str, Any], path: str | Path) -> None:
    """Write a checkpoint's dict to path so that path always holds either the old file or the whole new one.

    The file carries the payload's digest and ends with a seal, both checked by every read.
    A failed write (a full disk, say) becomes a UserError that says so.
    """
    path = Path(path)
    data = io.BytesIO()
    # serialised in memory first: torch.save reports a failing file as an opaque RuntimeError,
    # a plain write reports it as the OSError it is (ENOSPC: "No space left on device")
    torch.save({**payload, "digest": digest(payload)}, data)
    try:
        write_atomic(path, seal(bytearray(data.getbuffer())))
    except OSError as e:
        raise UserError(
            f"cannot save checkpoint {path}: {e.strerror or e}; the previous {path.name}, if any, "
            "is intact; free some space (or fix the directory) and try again"
        ) from None


def read_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu", advice: str | None = None
) -> Checkpoint:
    """The checkpoint, checked, in the current layout; any problem becomes a UserError saying what is wrong.

    `advice` replaces the usual hint (use another checkpoint) for a file that is damaged
    or not a checkpoint, where the caller knows better what the user can do.
    """
    path = Path(path)
    if problem := absent(path):
        raise UserError(problem)
    try:
        with warnings.catch_warnings():  # torch warns about formats it then fails on: our error says it once
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise UserError(refusal(path, e, advice)) from None
    except PermissionError:
        raise UserError(f"checkpoint {path} cannot be read (permission denied)") from None
    except Exception:  # anything else torch.load trips over: the bytes are not a checkpoint
        raise UserError(unreadable(path, advice)) from None
    problem = seal_problem(path)
    if problem:
        raise _damaged(path, problem, advice or OTHER_ADVICE)
    payload = upgraded(_checked(payload, path, advice or OTHER_ADVICE))
    _check_kinds(payload, path, advice or OTHER_ADVICE)
    return Checkpoint(**{_FIELDS[key]: value for key, value in payload.items() if key != "digest"})


def _checked(payload: Any, path: Path, advice: str) -> dict[str, Any]:
    if not isinstance(payload, dict) or "format_version" not in payload:
        raise UserError(
            f"{path} is not a tinygpt checkpoint (no format_version); "
            "pass a best.pt or last.pt written by scripts/train.py"
        )
    version = payload["format_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UserError(
            f"checkpoint {path} has format version {version!r}, which is not a valid version "
            f"(a whole number from 1); the file is damaged or not a tinygpt checkpoint; {advice}"
        )
    if version > FORMAT_VERSION:
        raise UserError(
            f"checkpoint {path} has format version {version}, newer than this tinygpt "
            f"reads ({FORMAT_VERSION}); upgrade tinygpt to load it"
        )
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise UserError(f"checkpoint {path} is incomplete: missing {', '.join(missing)}")
    unknown = [repr(k) for k in payload if k not in KNOWN_BEFORE.get(version, KNOWN_KEYS)]
    if unknown:
        raise _damaged(path, f"it holds unknown entries ({', '.join(unknown)})", advice)
    if "digest" in payload and payload["digest"] != digest(payload):
        raise _damaged(path, "its contents do not match the digest saved with them", advice)
    _check_contents(payload, path, advice)
    return payload


def _damaged(path: Path, what: str, advice: str) -> UserError:
    return UserError(f"checkpoint {path} is damaged: {what}; {advice}")


def _check_contents(payload: dict[str, Any], path: Path, advice: str) -> None:
    """Every entry checked against what the model config says: sizes, vocabulary, tensors, record."""
    payload["model_config"] = config = _model_config(payload["model_config"], path)
    chars = payload["tokenizer"]
    if not isinstance(chars, list) or any(not isinstance(c, str) or len(c) != 1 for c in chars):
        raise _damaged(path, "its vocabulary is not a list of single characters", advice)
    if len(set(chars)) != len(chars) or len(chars) != config["vocab_size"]:
        sizes = f"{len(set(chars))} distinct of {len(chars)} characters for a model of {config['vocab_size']}"
        raise _damaged(path, f"its vocabulary has {sizes}", advice)
    _check_weights(payload["model"], config, path, advice)
    record = payload.get("record", {})
    if not isinstance(record, dict) or not all(isinstance(k, str) and _plain(v) for k, v in record.items()):
        raise _damaged(path, "its training record is not a mapping of names to numbers and text", advice)


def _check_kinds(payload: dict[str, Any], path: Path, advice: str) -> None:
    """The optional entries are of their kinds (checked in the current layout, after any upgrade)."""
    for key, kind in (("config", dict), ("optimizer", dict), ("rng", list), ("corpus_digest", str)):
        if key in payload and not isinstance(payload[key], kind):
            raise _damaged(path, f"its {key} is {type(payload[key]).__name__}, not {kind.__name__}", advice)


def _model_config(raw: Any, path: Path) -> dict[str, Any]:
    """The model config, its sizes checked by the rules of a config's model section, vocab_size ≥ 1.

    A key GPTConfig does not know is left for the reader to report (export names the option).
    """
    needed = [f.name for f in dataclasses.fields(GPTConfig) if f.default is dataclasses.MISSING]
    if not isinstance(raw, dict) or any(k not in raw for k in needed):
        raise UserError(
            f"checkpoint {path} has no usable model config ({type(raw).__name__} without "
            f"all of {', '.join(needed)})"
        )
    vocab_size = raw["vocab_size"]
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise UserError(f"checkpoint {path}: model_config.vocab_size = {vocab_size!r} is not an integer ≥ 1")
    section = {k: raw[k] for k in vars(ModelSection()) if k in raw}
    checked = vars(from_dict({"model": section}, f"checkpoint {path}").model)
    return {k: checked.get(k, v) for k, v in raw.items()}


def _check_weights(weights: Any, config: dict[str, Any], path: Path, advice: str) -> None:
    """Tensors under names, of the sizes the config says (so building the model allocates no more), finite."""
    if not isinstance(weights, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()
    ):
        raise _damaged(path, "its model is not a mapping of names to tensors", advice)
    width = config["n_embd"]
    expected = {"wte.weight": (config["vocab_size"], width), "wpe.weight": (config["block_size"], width)}
    for name, shape in expected.items():
        if name not in weights or tuple(weights[name].shape) != shape:
            found = tuple(weights[name].shape) if name in weights else "missing"
            raise _damaged(path, f"its {name} is {found}, not {shape} as its model config says", advice)
    layers = {k.split(".")[1] for k in weights if k.startswith("h.")}
    if len(layers) != config["n_layer"] or layers != {str(i) for i in range(len(layers))}:
        raise _damaged(
            path, f"it holds {len(layers)} layers of weights for n_layer {config['n_layer']}", advice
        )
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise UserError(
                f"checkpoint {path} holds non-finite weights (NaN or infinity in {name}); "
                f"a model with them computes nothing useful; {advice}"
            )


def _plain(value: Any) -> bool:
    """A record's value: None, true/false, text, or a number but NaN (infinity: no loss seen yet)."""
    if isinstance(value, float):
        return not math.isnan(value)
    return value is None or isinstance(value, (bool, int, str))


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> tuple[GPT, CharTokenizer, dict]:
    """Load a saved model for use: (model in eval mode on device, tokenizer, training record)."""
    checkpoint = read_checkpoint(path)
    model = checkpoint.build_model(path).to(device).eval()
    return model, checkpoint.tokenizer, checkpoint.record


def latest_checkpoint(root: str | Path = "checkpoints") -> Path:
    """The most recently written best.pt under root."""
    found = sorted(Path(root).glob("**/best.pt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise UserError(
            f"no checkpoint found under {root}/; train one first "
            "(python scripts/train.py --config configs/cpu.yaml) or pass --checkpoint"
        )
    return found[-1]


def chosen_checkpoint(given: str | Path | None, root: str | Path = "checkpoints") -> Path:
    """The checkpoint a command uses: the one given, else the newest best.pt under root, said on stderr.

    The rule is by time, not by run, so after training two runs the newest wins: the line
    names the file, so that a sample from another run than meant is never a silent one.
    """
    if given:
        return Path(given)
    path = latest_checkpoint(root)
    print(
        f"using {shown(path)}, the newest best.pt under {shown(root)}/ (choose one with --checkpoint)",
        file=sys.stderr,
    )
    return path
