"""Export a checkpoint for other tools: a Hugging Face transformers GPT-2, or bare safetensors.

`hf` writes a directory that transformers loads (its files, and the conversion: tinygpt.app.hf).
`transformer-lens` writes the same directory, checked in TransformerLens (tinygpt.app.lens_bridge).

`sae-lens` writes a run's feature dictionary (one hook point's, `tinygpt features`) as SAELens's TopK SAE:
cfg.json and sae_weights.safetensors, which `sae_lens.SAE.load_from_disk` reads (tinygpt.app.lens_bridge).

`safetensors` writes the bare weights under tinygpt's own names
(model.safetensors, the tied lm_head stored once as wte) and config.json with
the model config and the vocabulary; `load_safetensors` reads them back.
"""

import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tinygpt.app.features import chosen_file, remake
from tinygpt.app.hf import check_exportable, need, write_hf
from tinygpt.app.lens_bridge import TRANSFORMER_LENS_CARD, check_directory, check_loadable, sae_lens_files
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import Checkpoint, read_checkpoint
from tinygpt.files.feature_file import FeatureFile, read_features
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer

FORMATS = ("hf", "safetensors", "transformer-lens", "sae-lens")
SAFETENSORS_FORMAT = "tinygpt-safetensors"


def export(
    checkpoint: str | Path,
    out_dir: str | Path,
    fmt: str = "hf",
    layer: int | None = None,
    site: str | None = None,
) -> str:
    """Write the checkpoint's model to out_dir in format fmt (FORMATS), or with sae-lens the feature
    dictionary of its run that layer and site choose (each optional, as for inspect --features); returns
    a summary line."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt != "sae-lens" and (layer, site) != (None, None):
        raise UserError(
            f"--layer and --site choose the dictionary of --format sae-lens; --format {fmt} exports the "
            "whole model: leave them out"
        )
    saved = read_checkpoint(checkpoint)
    check_exportable(saved.model_config)
    if fmt == "transformer-lens":
        check_loadable(saved.model_config, saved.chars)
    features = _dictionary(Path(checkpoint), saved, layer, site) if fmt == "sae-lens" else None
    model = saved.build_model(checkpoint).eval()
    chars = saved.chars
    if not str(out_dir):  # Path("") would be ".", the directory the command runs in
        raise UserError("the export's out_dir is empty; name a new directory, e.g. exports/cpu")
    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    with _built_then_renamed(out_dir) as partial:
        if fmt == "hf":
            difference = write_hf(model, chars, saved.record, checkpoint, partial)
            detail = f"logits match tinygpt's within {difference:.1e}"
        elif fmt == "transformer-lens":  # the Hugging Face directory, loaded and checked in TransformerLens
            write_hf(model, chars, saved.record, checkpoint, partial)
            difference = check_directory(model, partial)
            with open(partial / "README.md", "a", encoding="utf-8") as card:
                card.write(TRANSFORMER_LENS_CARD)
            detail = f"TransformerLens's logits match tinygpt's within {difference:.1e}"
        elif fmt == "sae-lens":
            hook = _write_sae_lens(features, model.config.block_size, partial)
            detail = f"load it with sae_lens.SAE.load_from_disk; it reads TransformerLens's {hook}"
        else:
            _write_safetensors(model, chars, partial)
            detail = "load it with tinygpt.app.export.load_safetensors"
    files = ", ".join(sorted(p.name for p in out_dir.iterdir()))
    return f"exported {checkpoint} to {out_dir} ({fmt}: {files}); {detail}"


# ---------------------------------------------------------------- Hugging Face transformers


# ---------------------------------------------------------------- bare safetensors


def _write_safetensors(model: GPT, chars: list[str], out: Path) -> None:
    need("safetensors", "--format safetensors")
    need("numpy", "--format safetensors")  # safetensors' writer hands the bytes over through NumPy
    from safetensors.torch import save_file

    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "format": SAFETENSORS_FORMAT,
        "model_config": vars(model.config),
        "vocabulary": chars,  # id i is vocabulary[i]
        "tied": {"lm_head.weight": "wte.weight"},
    }
    (out / "config.json").write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def load_safetensors(directory: str | Path) -> tuple[GPT, CharTokenizer]:
    """Read what `export(..., format="safetensors")` wrote: (model in eval mode, tokenizer)."""
    need("safetensors", "loading safetensors")
    from safetensors.torch import load_file

    directory = Path(directory)
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        tensors = load_file(str(directory / "model.safetensors"))
    except (OSError, ValueError) as e:
        raise UserError(f"{directory} is not a tinygpt safetensors export ({e})") from None
    if config.get("format") != SAFETENSORS_FORMAT:
        raise UserError(f"{directory}/config.json is not a tinygpt safetensors export")
    for name, source in config["tied"].items():
        tensors[name] = tensors[source]
    model = GPT(GPTConfig(**config["model_config"]))
    model.load_state_dict(tensors)
    return model.eval(), CharTokenizer(config["vocabulary"])


# ---------------------------------------------------------------- SAELens


def _dictionary(checkpoint: Path, saved: Checkpoint, layer: int | None, site: str | None) -> FeatureFile:
    """The run's feature file that layer and site choose, checked to be this checkpoint's."""
    path = chosen_file(checkpoint, layer, site)
    return read_features(path, saved, remake(checkpoint.parent, *path.name.split(".")[:2]))


def _write_sae_lens(features: FeatureFile, context_size: int, out: Path) -> str:
    """cfg.json and sae_weights.safetensors, as SAELens saves a TopK SAE; returns its hook point's name."""
    need("safetensors", "--format sae-lens")
    need("numpy", "--format sae-lens")  # as --format safetensors
    from safetensors.torch import save_file

    cfg, tensors = sae_lens_files(features, context_size)
    save_file(tensors, str(out / "sae_weights.safetensors"), metadata={"format": "pt"})
    (out / "cfg.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    return cfg["metadata"]["hook_name"]


# ---------------------------------------------------------------- the output directory


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} is a file; export into a new directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise UserError(f"{out_dir} already exists and is not empty; export into a new directory")
    if out_dir.is_symlink() and not out_dir.exists():
        raise UserError(
            f"{out_dir} is a symbolic link to nothing (or a loop of links); export into a new directory"
        )
    if out_dir.is_symlink():  # to an empty directory: the rename into place would meet the link itself
        raise UserError(
            f"{out_dir} is a symbolic link; an export is written beside its directory and renamed into "
            "place, which a link cannot take: export into a new directory inside it, "
            f"e.g. {out_dir / 'model'}"
        )
    if out_dir.is_dir() and os.path.ismount(out_dir):  # the rename into place would fail: EBUSY
        read_only = _read_only(out_dir)
        inside = "on a writable file system" if read_only else f"inside it, e.g. {out_dir / 'model'}"
        raise UserError(
            f"{out_dir} is a mount point{' of a read-only file system' if read_only else ''}; "
            "an export is written beside its directory and renamed into place, which a mount point cannot "
            f"be: export into a new directory {inside}"
        )


def _read_only(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def _fix(error: BaseException) -> str:
    """What to do about a failed write: a read-only file system is not made writable by freeing space."""
    if isinstance(error, OSError) and error.errno == errno.EROFS:
        return "export onto a writable file system"
    return "free some space (or fix the directory) and export again"


@contextmanager
def _built_then_renamed(out_dir: Path) -> Iterator[Path]:
    """A hidden sibling directory to write into, renamed to out_dir only once complete."""
    partial = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.partial")
    try:
        partial.mkdir(parents=True)
    except OSError as e:
        raise UserError(f"cannot create {out_dir}: {e.strerror}; {_fix(e)}") from None
    try:
        yield partial
        _readable_by_all(partial)
        os.replace(partial, out_dir)  # onto nothing or onto an empty directory
    except BaseException as e:
        shutil.rmtree(partial, ignore_errors=True)
        reason = _write_failure(e)
        if reason is None:
            raise
        raise UserError(
            f"cannot write the export to {out_dir}: {reason}; nothing was written; {_fix(e)}"
        ) from None


def _write_failure(error: BaseException) -> str | None:
    """Why a write failed (a full disk, say), if `error` is a failed write; None for anything else.

    An OSError says it in strerror. safetensors writes from Rust and raises its own
    SafetensorError, whose text wraps the OS's message: `Error while serializing: I/O
    error: No space left on device (os error 28)` (older versions: `IoError(Os { …,
    message: "No space left on device" })`).
    """
    if isinstance(error, OSError):
        return error.strerror or str(error)
    try:
        from safetensors import SafetensorError
    except ImportError:
        return None
    if not isinstance(error, SafetensorError):
        return None
    said = re.search(r'I/O error: (.*) \(os error \d+\)|IoError\(.*message: "([^"]*)"', str(error))
    return (said[1] or said[2]) if said else None


def _readable_by_all(directory: Path) -> None:
    """Mode 0644 for every file written, as for the rest of what tinygpt writes.

    safetensors writes model.safetensors through a private temporary file, mode 0600,
    which would leave the export's weights unreadable to anyone else who is to use them.
    """
    for path in directory.iterdir():
        path.chmod(0o644)
