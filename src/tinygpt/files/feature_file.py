"""A feature file: one layer's dictionary of features, kept like a checkpoint: sealed, versioned, plain data.

`tinygpt features RUN` writes RUN/features/<site>.<layer>.pt (e.g. features/mlp_out.1.pt). This module is the
one place that knows its layout. In the file (format version 2), every entry plain data, so that
`torch.load(..., weights_only=True)` reads it:

    format_version   int: bumped when the layout changes
    kind             "tinygpt features": told apart from a checkpoint read by mistake
    layer, site      where the activations were read: the hook point blocks.<layer>.<site>
    W_enc (d, n), b_enc (n,), W_dec (n, d), b_dec (d,), k, input_scale
                     the TopK dictionary (tinygpt.explain.dictionary): z = the k largest of
                     ReLU((x·input_scale − b_dec) @ W_enc + b_enc), x̂ = (z @ W_dec + b_dec) / input_scale
    model_digest     sha256 of the model it was trained on (config, weights, vocabulary: `model_digest`):
                     a feature file is refused beside any other model, even one saved with the same name
    record           how it was trained (steps, positions, seconds, …) and its quality on the validation
                     split, with the same for the control dictionary trained on the step-0 weights
    features         one dict per latent, in latent order: density, histogram, contexts with their
                     shading, promoted and suppressed characters, descriptions
                     (tinygpt.explain.feature_notes), as one JSON text: the safe loader reads
                     thousands of small objects slowly (0.8 s for 3,072 notes, against 0.16 s)
    digest           sha256 of everything above (tinygpt.files.integrity), and the archive sealed at its end

Any problem reading one is a single UserError naming the file.
"""

import io
import json
import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tinygpt.errors import UserError
from tinygpt.files.atomic import write_atomic
from tinygpt.files.checkpoint import Checkpoint
from tinygpt.files.integrity import digest, refusal, seal, seal_problem, unreadable

FORMAT_VERSION = 2  # 2: the notes as JSON text, their contexts shaded
KIND = "tinygpt features"
TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec")
KIND_WORDS = "feature file"  # how messages name one


@dataclass
class FeatureFile:
    """What a feature file holds, typed: `tinygpt.explain.features` makes one, `read_features` returns one."""

    layer: int
    site: str
    W_enc: torch.Tensor  # (d, n)
    b_enc: torch.Tensor  # (n,)
    W_dec: torch.Tensor  # (n, d)
    b_dec: torch.Tensor  # (d,)
    k: int
    input_scale: float
    model_digest: str
    record: dict[str, Any] = field(default_factory=dict)
    features: list[dict[str, Any]] = field(default_factory=list)

    @property
    def size(self) -> int:
        """n, the number of latents."""
        return self.W_dec.size(0)

    def to_payload(self) -> dict[str, Any]:
        payload = {"format_version": FORMAT_VERSION, "kind": KIND, **vars(self)}
        payload.update({name: getattr(self, name).detach().cpu().contiguous() for name in TENSORS})
        payload["features"] = json.dumps(self.features)
        return payload


def model_digest(checkpoint: Checkpoint) -> str:
    """sha256 of what a checkpoint holds of its model: config, weights, vocabulary (not its record,
    so best.pt saved again with the same weights keeps its features)."""
    return digest(
        {"model_config": checkpoint.model_config, "model": checkpoint.weights, "chars": checkpoint.chars}
    )


def feature_path(run: Path, site: str, layer: int) -> Path:
    """Where a run's features of one hook point live: RUN/features/<site>.<layer>.pt."""
    return run / "features" / f"{site}.{layer}.pt"


def save_features(features: FeatureFile, path: Path) -> None:
    """Write the file whole or not at all (the atomic writer), its digest inside and its seal at its end."""
    payload = features.to_payload()
    data = io.BytesIO()
    torch.save({**payload, "digest": digest(payload)}, data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, seal(bytearray(data.getbuffer())))
    except OSError as e:
        raise UserError(
            f"cannot save {KIND_WORDS} {path}: {e.strerror or e}; free some space and try again"
        ) from None


def read_features(path: Path, checkpoint: Checkpoint, remake: str) -> FeatureFile:
    """The feature file at path, checked to be whole, of this version, and made for this checkpoint's model.

    remake: the command that makes the file again, for the messages (`tinygpt features RUN --layer 1`).
    """
    if not path.is_file():
        raise UserError(f"there are no features at {path}; make them with {remake}")
    advice = f"make it again with {remake}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise UserError(refusal(path, e, advice, KIND_WORDS)) from None
    except Exception:
        raise UserError(unreadable(path, advice, KIND_WORDS)) from None
    if problem := seal_problem(path):
        raise UserError(f"{KIND_WORDS} {path} is damaged: {problem}; {advice}")
    found = _checked(payload, path, advice)
    if found.model_digest != model_digest(checkpoint):
        raise UserError(
            f"{KIND_WORDS} {path} was made for another model than this checkpoint's (trained further, or "
            f"another run's); {advice}"
        )
    return found


def _checked(payload: Any, path: Path, advice: str) -> FeatureFile:
    """The payload as a FeatureFile, or the one line that says what is wrong with it."""
    if not isinstance(payload, dict) or payload.get("kind") != KIND:
        raise UserError(f"{path} is not a tinygpt {KIND_WORDS} (no kind {KIND!r}); {advice}")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        newer = isinstance(version, int) and version > FORMAT_VERSION
        why = (
            "newer than this tinygpt reads: upgrade tinygpt"
            if newer
            else f"not one this tinygpt reads; {advice}"
        )
        raise UserError(f"{KIND_WORDS} {path} has format version {version!r}, {why}")
    if payload.get("digest") != digest(payload):
        raise UserError(f"{KIND_WORDS} {path} is damaged: its contents do not match its digest; {advice}")
    fields = {name: payload.get(name) for name in FeatureFile.__dataclass_fields__}
    tensors = [fields[name] for name in TENSORS]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise UserError(f"{KIND_WORDS} {path} is damaged: it lacks {', '.join(TENSORS)}; {advice}")
    W_enc, b_enc, W_dec, b_dec = tensors
    if W_dec.dim() != 2:
        raise UserError(f"{KIND_WORDS} {path} is damaged: its W_dec is not a matrix; {advice}")
    n, d = W_dec.shape
    k, scale = fields["k"], fields["input_scale"]
    if (
        W_enc.shape != (d, n)
        or b_enc.shape != (n,)
        or b_dec.shape != (d,)
        or type(k) is not int
        or not 1 <= k <= n
    ):
        raise UserError(f"{KIND_WORDS} {path} is damaged: its tensors' shapes and k do not agree; {advice}")
    kinds = {
        "layer": int,
        "site": str,
        "input_scale": float,
        "model_digest": str,
        "record": dict,
        "features": list,
    }
    fields["features"] = notes(fields["features"])
    wrong = [name for name, kind in kinds.items() if type(fields[name]) is not kind]
    if wrong or not scale > 0 or len(fields["features"]) != n:
        what = ", ".join(wrong) or "input_scale or notes"
        raise UserError(
            f"{KIND_WORDS} {path} is damaged: its {what} are not what a feature file holds; {advice}"
        )
    return FeatureFile(**fields)


def notes(text: Any) -> Any:
    """The notes' JSON text read back as a list; anything else as it is (then refused as damaged)."""
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text
