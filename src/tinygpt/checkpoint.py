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
"""

import io
import pickle
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from tinygpt.errors import UserError
from tinygpt.files import write_atomic
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "model_config", "model", "tokenizer")


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

    A failed write (a full disk, say) becomes a UserError that says so.
    """
    path = Path(path)
    data = io.BytesIO()
    # serialised in memory first: torch.save reports a failing file as an opaque RuntimeError,
    # a plain write reports it as the OSError it is (ENOSPC: "No space left on device")
    torch.save(payload, data)
    try:
        write_atomic(path, data.getbuffer())
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
        if "GLOBAL" in str(e):  # it names a class or function: the safe loader will not import it
            raise UserError(
                f"refusing to load {path}: it holds Python objects that would run code "
                "when unpickled, and a tinygpt checkpoint holds only tensors and plain "
                "data; do not use this file"
            ) from None
        raise UserError(_unreadable(path, advice)) from None  # bytes that are not a pickle at all
    except PermissionError:
        raise UserError(f"checkpoint {path} cannot be read (permission denied)") from None
    except Exception:  # anything else torch.load trips over: the bytes are not a checkpoint
        raise UserError(_unreadable(path, advice)) from None
    return _checked(payload, path)


def _checked(payload: Any, path: Path) -> dict[str, Any]:
    if not isinstance(payload, dict) or "format_version" not in payload:
        raise UserError(
            f"{path} is not a tinygpt checkpoint (no format_version); "
            "pass a best.pt or last.pt written by scripts/train.py"
        )
    version = payload["format_version"]
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise UserError(
            f"checkpoint {path} has format version {version}, newer than this tinygpt "
            f"reads ({FORMAT_VERSION}); upgrade tinygpt to load it"
        )
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise UserError(f"checkpoint {path} is incomplete: missing {', '.join(missing)}")
    return payload


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
    return f"{problem}; {advice or 'use another checkpoint, e.g. last.pt or best.pt of the run'}"


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
