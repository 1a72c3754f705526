"""Checkpoints: one dict of tensors and plain data, written atomically, read without running code.

Contents (every key plain data, so `torch.load(..., weights_only=True)` reads it), as
`build_payload` makes them:

    format_version   int: bumped when the layout changes
    model_config     dict: GPTConfig's fields
    model            state_dict of the plain (uncompiled, unwrapped) model
    tokenizer        list of the vocabulary's characters, in id order
    config           the resolved run config, as a dict
    record           the training record (see tinygpt.training.loop): step, tokens_seen, best_val_loss,
                     best_step, wall_time_s, train_loss, val_loss, device, dtype, torch_version,
                     num_params, world_size, global_batch
    optimizer        (last.pt only) the optimizer's state_dict, for --resume
    rng              (last.pt only) rank 0's random states: {"torch", "batches", and "cuda" on CUDA}
    rank_rng         (last.pt of a run on several processes only) the same, one dict per rank
    digest           sha256 of everything above, added by `save_checkpoint` (see `digest`)

Reading checks a checkpoint as strictly as a config: the digest (when there is one: files
written before it existed have none), every key, the model's sizes against its tensors,
the vocabulary, the record, and that every weight is finite. Any problem is one UserError
naming the file; a file that passes builds its model without surprises.
"""

import dataclasses
import io
import math
import pickle
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from tinygpt.config import ModelSection, from_dict
from tinygpt.errors import UserError
from tinygpt.files import write_atomic
from tinygpt.integrity import SEAL_BROKEN, digest, pickle_imports, seal, seal_problem
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "model_config", "model", "tokenizer")
KNOWN_KEYS = (*REQUIRED_KEYS, "config", "record", "optimizer", "rng", "rank_rng", "digest")
OTHER_ADVICE = "use another checkpoint, e.g. last.pt or best.pt of the run"


def build_payload(
    model: GPT,
    tokenizer: CharTokenizer,
    config: dict[str, Any],
    record: dict[str, Any],
    optimizer: dict[str, Any] | None = None,
    rank_rng: list[dict[str, torch.Tensor]] | None = None,
) -> dict[str, Any]:
    """A checkpoint's dict (the module docstring lists every key); with optimizer and rng for last.pt."""
    payload = {
        "format_version": FORMAT_VERSION,
        "model_config": vars(model.config),
        "model": model.state_dict(),
        "tokenizer": tokenizer.chars,
        "config": config,
        "record": record,
    }
    if optimizer is not None:
        payload["optimizer"] = optimizer
    if rank_rng is not None:
        payload["rng"] = rank_rng[0]
        if len(rank_rng) > 1:
            payload["rank_rng"] = rank_rng
    return payload


def save_checkpoint(payload: dict[str, Any], path: str | Path) -> None:
    """Write payload to path so that path always holds either the old file or the whole new one.

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
) -> dict[str, Any]:
    """The checkpoint dict, checked; any problem becomes a UserError saying what is wrong.

    `advice` replaces the usual hint (use another checkpoint) for a file that is damaged
    or not a checkpoint, where the caller knows better what the user can do.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(
            f"checkpoint {path} does not exist; train one first "
            "(python scripts/train.py --config configs/cpu.yaml) or pass --checkpoint"
        )
    if path.is_dir():
        raise UserError(f"checkpoint {path} is a directory; pass a .pt file such as {path}/best.pt")
    try:
        with warnings.catch_warnings():  # torch warns about formats it then fails on: our error says it once
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise UserError(_refused(path, e, advice)) from None
    except PermissionError:
        raise UserError(f"checkpoint {path} cannot be read (permission denied)") from None
    except Exception:  # anything else torch.load trips over: the bytes are not a checkpoint
        raise UserError(_unreadable(path, advice)) from None
    problem = seal_problem(path)
    if problem:
        raise _damaged(path, problem, advice or OTHER_ADVICE)
    return _checked(payload, path, advice or OTHER_ADVICE)


def _refused(path: Path, error: pickle.UnpicklingError, advice: str | None) -> str:
    """Why the safe loader refused the pickle: it would run code, it is in a form it does not read, or damage.

    The loader stops at the first opcode it does not know (protocol 4's FRAME, protocol 0's
    INST), before it sees what the pickle would import; the pickle is read here without running it.
    """
    if seal_problem(path) == SEAL_BROKEN:  # a file tinygpt wrote, damaged since
        return _unreadable(path, advice)
    try:
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl")
            names = pickle_imports(archive.read(name))
    except Exception:  # not an archive, or a pickle too damaged to read
        names = None
    if "GLOBAL" in str(error) or any(
        not (n.startswith("torch.") or n == "collections.OrderedDict") for n in names or ()
    ):
        return (
            f"refusing to load {path}: it holds Python objects that would run code "
            "when unpickled, and a tinygpt checkpoint holds only tensors and plain "
            "data; do not use this file"
        )
    if names is not None:
        return (
            f"checkpoint {path} is pickled in a form the safe loader does not read (not torch.save's "
            "default protocol 2); save it again with torch.save, or use a best.pt or last.pt"
        )
    return _unreadable(path, advice)  # bytes that are not a pickle at all


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
    unknown = [repr(k) for k in payload if k not in KNOWN_KEYS]
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
        raise _damaged(
            path,
            f"its vocabulary has {len(set(chars))} distinct of {len(chars)} characters "
            f"for a model of {config['vocab_size']}",
            advice,
        )
    _check_weights(payload["model"], config, path, advice)
    record = payload.get("record", {})
    if not isinstance(record, dict) or not all(isinstance(k, str) and _plain(v) for k, v in record.items()):
        raise _damaged(path, "its training record is not a mapping of names to numbers and text", advice)
    for key, kind in (("config", dict), ("optimizer", dict), ("rng", dict), ("rank_rng", list)):
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


def _unreadable(path: Path, advice: str | None) -> str:
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        problem = f"checkpoint {path} is empty"
    elif head == b"PK\x03\x04":  # the start of torch.save's zip archive
        problem = f"checkpoint {path} is truncated or corrupted and cannot be read"
    else:
        problem = f"{path} is not a tinygpt checkpoint (not a file written by torch.save)"
        advice = advice or "pass a best.pt or last.pt"
    return f"{problem}; {advice or OTHER_ADVICE}"


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def model_from_payload(payload: dict[str, Any], path: Path | str = "checkpoint") -> GPT:
    try:
        model = GPT(GPTConfig(**payload["model_config"]))
        model.load_state_dict(payload["model"])
    except (TypeError, RuntimeError, KeyError, AssertionError) as e:
        raise UserError(f"checkpoint {path} does not hold a matching model ({_first_line(e)})") from None
    return model


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> tuple[GPT, CharTokenizer, dict]:
    """Load a saved model for use: (model in eval mode on device, tokenizer, training record)."""
    payload = read_checkpoint(path)
    model = model_from_payload(payload, path).to(device).eval()
    tokenizer = CharTokenizer(payload["tokenizer"])
    return model, tokenizer, payload.get("record", {})


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
    print(f"using {path}, the newest best.pt under {root}/ (choose one with --checkpoint)", file=sys.stderr)
    return path
