"""Head scores kept beside the checkpoint: scored once (tinygpt.explain.heads), read back by every later
view of the same model.

    <the checkpoint's directory>/cache/heads.<key>.pt

The key is a sha256 of what the scores depend on: the digest (tinygpt.files.integrity's) of the
checkpoint's model config, vocabulary and the model's weights as they are now (the checkpoint's own,
unless a notebook changed them), the validation windows scored (their ids: another corpus,
another key), the probes' count and seed, and SCORING, this code's version of the scoring. The file
holds the key again and plain data only; it is read with weights_only=True and trusted only when its
key matches. A file that is damaged, unreadable or another key's is scored again and written over, never
an error; a directory that cannot be written keeps nothing (the scores are still returned). best.pt
and last.pt share the directory, each under its own key.
"""

import hashlib
import io
from pathlib import Path
from typing import Any

import torch

from tinygpt.files.atomic import write_atomic
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.files.integrity import digest
from tinygpt.model import GPT

SCORING = 1  # raise it when the scoring changes what it computes: every kept file is then scored again
CACHE_DIR = "cache"


def heads_key(saved: Checkpoint, model: GPT, windows: torch.Tensor, probes: int, seed: int) -> str:
    """The key of model's scores (saved's model) on `windows` (N, T + 1) and `probes` probes from `seed`."""
    weights = digest({"model_config": saved.model_config, "model": model.state_dict(), "chars": saved.chars})
    h = hashlib.sha256(f"tinygpt heads {SCORING};{weights};{probes};{seed};".encode())
    ids = windows.to(torch.int64).flatten().clone()  # its own storage: exactly these ids
    h.update(f"{tuple(windows.shape)};".encode() + bytes(ids.untyped_storage()))  # NumPy not needed
    return h.hexdigest()


def cache_path(checkpoint: str | Path, key: str) -> Path:
    return Path(checkpoint).parent / CACHE_DIR / f"heads.{key[:32]}.pt"


def read_kept(checkpoint: str | Path, key: str) -> dict[str, Any] | None:
    """The scores kept for key beside checkpoint, or None (none kept, damaged, or another key's)."""
    path = cache_path(checkpoint, key)
    try:
        kept = torch.load(path, weights_only=True, map_location="cpu")
    except Exception:  # absent, unreadable, truncated, not ours: scored again
        return None
    if not isinstance(kept, dict) or kept.get("key") != key or not isinstance(kept.get("heads"), dict):
        return None
    return kept["heads"]


def keep(checkpoint: str | Path, key: str, heads: dict[str, Any]) -> None:
    """Write the scores beside checkpoint (atomically); a directory that cannot be written keeps nothing."""
    path = cache_path(checkpoint, key)
    buffer = io.BytesIO()
    torch.save({"key": key, "heads": heads}, buffer)
    try:
        path.parent.mkdir(exist_ok=True)
        write_atomic(path, buffer.getbuffer())
    except OSError:
        return
