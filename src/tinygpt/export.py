"""Export a checkpoint for other tools: a Hugging Face transformers GPT-2, or bare safetensors.

`hf` writes a directory that `transformers.GPT2LMHeadModel.from_pretrained` and
`AutoTokenizer.from_pretrained` load:

    config.json, generation_config.json   GPT2Config: sizes, exact GELU, layer norm eps 1e-5, tied head
    model.safetensors                      the weights under GPT-2's names
    tokenizer.json, tokenizer_config.json  one token per character: the checkpoint's vocabulary, same ids
    README.md                              where the model came from and how to use it

tinygpt is GPT-2's architecture, so the export is exact: the same names,
learned absolute positions, pre-norm blocks, the LM head tied to the token
embedding. One choice differs from GPT-2 and is named in the config: tinygpt's
MLP uses the exact GELU, x·Φ(x) (GPT-2 used its tanh approximation), which
transformers calls "gelu" and computes with the very kernel tinygpt calls.
Two layouts differ and are
converted: GPT-2's linear layers are Conv1D modules whose weight is (in, out),
nn.Linear's transposed; and GPT-2 always has biases, so a model trained with
bias=False gets zero biases, which compute exactly what no bias computes.
Before anything is written the exported model is run on the same ids as the
checkpoint's and must give the same logits (within TOLERANCE, relative to the
largest logit); a checkpoint with a model option GPT-2 cannot express is refused.

`safetensors` writes the bare weights under tinygpt's own names
(model.safetensors, the tied lm_head stored once as wte) and config.json with
the model config and the vocabulary; `load_safetensors` reads them back.
"""

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from tinygpt.checkpoint import model_from_payload, read_checkpoint
from tinygpt.errors import UserError
from tinygpt.model import GPT, GPTConfig, LayerNorm
from tinygpt.tokenizer import CharTokenizer

FORMATS = ("hf", "safetensors", "transformer-lens")
TOLERANCE = 1e-5  # largest |logit difference| allowed, per unit of the largest |logit| (at least 1)
EXPORTABLE = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias"}
SAFETENSORS_FORMAT = "tinygpt-safetensors"


def export(checkpoint: str | Path, out_dir: str | Path, fmt: str = "hf") -> str:
    """Write the checkpoint's model to out_dir in format fmt (hf or safetensors); returns a summary line."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    payload = read_checkpoint(checkpoint)
    check_exportable(payload["model_config"])
    if fmt == "transformer-lens":  # tinygpt.lens_bridge builds on this module: imported only for it
        from tinygpt.lens_bridge import check_directory, check_loadable

        check_loadable(payload["model_config"], payload["tokenizer"])
    model = model_from_payload(payload, checkpoint).eval()
    chars = payload["tokenizer"]
    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    with _built_then_renamed(out_dir) as partial:
        if fmt == "hf":
            difference = _write_hf(model, chars, payload, checkpoint, partial)
            detail = f"logits match tinygpt's within {difference:.1e}"
        elif fmt == "transformer-lens":  # the Hugging Face directory, loaded and checked in TransformerLens
            _write_hf(model, chars, payload, checkpoint, partial)
            difference = check_directory(model, partial)
            with open(partial / "README.md", "a", encoding="utf-8") as card:
                card.write(TRANSFORMER_LENS_CARD)
            detail = f"TransformerLens's logits match tinygpt's within {difference:.1e}"
        else:
            _write_safetensors(model, chars, partial)
            detail = "load it with tinygpt.export.load_safetensors"
    files = ", ".join(sorted(p.name for p in out_dir.iterdir()))
    return f"exported {checkpoint} to {out_dir} ({fmt}: {files}); {detail}"


def check_exportable(model_config: dict[str, Any]) -> None:
    """Refuse a model with an option this exporter does not know how to write exactly."""
    unknown = sorted(set(model_config) - EXPORTABLE)
    if unknown:
        raise UserError(
            f"the checkpoint's model has option(s) {', '.join(unknown)}, which the GPT-2 export "
            "cannot reproduce exactly; not exported"
        )


# ---------------------------------------------------------------- Hugging Face transformers


@torch.no_grad()
def gpt2_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The model's weights under GPT2LMHeadModel's names and layouts.

    The names are the same, under `transformer.`. GPT-2's Conv1D stores a
    weight as (in, out), nn.Linear's (out, in) transposed. Biases that a
    bias=False model lacks are zeros, which add nothing.
    """
    out = {
        "transformer.wte.weight": model.wte.weight.detach(),
        "transformer.wpe.weight": model.wpe.weight.detach(),
        "lm_head.weight": model.wte.weight.detach(),  # tied
    }
    for name, module in model.named_modules():
        if isinstance(module, LayerNorm):
            weight = module.weight.detach()  # (C,)
            out[f"transformer.{name}.weight"] = weight
            bias = torch.zeros_like(weight) if module.bias is None else module.bias
            out[f"transformer.{name}.bias"] = bias.detach()
        elif isinstance(module, nn.Linear) and module is not model.lm_head:
            weight = module.weight.detach()  # (out, in)
            out[f"transformer.{name}.weight"] = weight.t().contiguous()  # (in, out)
            bias = weight.new_zeros(module.out_features) if module.bias is None else module.bias
            out[f"transformer.{name}.bias"] = bias.detach()
    return out


def gpt2_config(config: GPTConfig):
    """transformers' GPT2Config for a tinygpt model: the same sizes and every choice spelled out."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.block_size,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=4 * config.n_embd,
        activation_function="gelu",  # F.gelu, the exact form, as tinygpt's MLP calls it
        layer_norm_epsilon=1e-5,
        resid_pdrop=config.dropout,  # dropout matters only when training
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        initializer_range=0.02,
        scale_attn_weights=True,  # q·kᵀ/√d
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
        tie_word_embeddings=True,
        bos_token_id=None,  # a character model has no special tokens
        eos_token_id=None,
        pad_token_id=None,
    )


def to_gpt2(model: GPT):
    """A transformers GPT2LMHeadModel (eval mode) with the model's weights."""
    _need("transformers", "--format hf")
    from transformers import GPT2LMHeadModel

    hf_model = GPT2LMHeadModel(gpt2_config(model.config))
    hf_model.load_state_dict(gpt2_state_dict(model), strict=True)
    return hf_model.eval()


@torch.no_grad()
def compare_logits(model: GPT, hf_model, batch_size: int = 2, seed: int = 0) -> tuple[float, float]:
    """(largest |logit difference|, largest |logit|) of the two models on random full-length sequences."""
    generator = torch.Generator().manual_seed(seed)
    c = model.config
    idx = torch.randint(c.vocab_size, (batch_size, c.block_size), generator=generator)  # (B, T)
    ours, _ = model(idx)  # (B, T, vocab)
    theirs = hf_model(idx).logits  # (B, T, vocab)
    return (ours - theirs).abs().max().item(), ours.abs().max().item()


def character_tokenizer(chars: list[str]):
    """A `tokenizers` Tokenizer that gives each character its checkpoint id and decodes by joining them.

    The pre-tokenizer isolates every character (newlines and spaces too); the
    word-level model maps each to its id; a character outside the vocabulary
    is an error, as in tinygpt.
    """
    _need("tokenizers", "--format hf")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()  # "".join: no spaces between characters
    return tokenizer


def _write_hf(model: GPT, chars: list[str], payload: dict, checkpoint: str | Path, out: Path) -> float:
    hf_model = to_gpt2(model)
    from transformers.utils import logging

    difference, scale = compare_logits(model, hf_model)
    if not difference <= TOLERANCE * max(1.0, scale):
        raise UserError(
            f"the exported model's logits differ from tinygpt's by {difference:.2e} (logits up to "
            f"{scale:.2f}); that is more than rounding, so nothing was written"
        )
    logging.disable_progress_bar()  # one file: no bar needed
    hf_model.save_pretrained(out)  # config.json, generation_config.json, model.safetensors
    character_tokenizer(chars).save(str(out / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,  # decode must give back exactly the characters
        "model_max_length": model.config.block_size,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (out / "README.md").write_text(_model_card(model.config, payload, checkpoint), encoding="utf-8")
    return difference


def _model_card(config: GPTConfig, payload: dict, checkpoint: str | Path) -> str:
    record = payload.get("record", {})
    trained = f"step {record['step']:,}" if "step" in record else "an unknown step"
    if isinstance(record.get("val_loss"), float):
        trained += f", validation loss {record['val_loss']:.4f}"
    return f"""# A character-level GPT exported from tinygpt

From `{checkpoint}` ({trained}): {config.n_layer} layers, {config.n_head} heads,
{config.n_embd} wide, a context of {config.block_size} characters and a vocabulary of
{config.vocab_size} characters. The architecture is GPT-2's, so transformers runs it as a
`GPT2LMHeadModel`; the tokenizer maps each character to one id.

```python
from transformers import AutoTokenizer, GPT2LMHeadModel

tokenizer = AutoTokenizer.from_pretrained("path/to/this/directory")
model = GPT2LMHeadModel.from_pretrained("path/to/this/directory")


def known_characters(text):  # the text without the characters this model has no id for
    vocabulary = tokenizer.get_vocab()
    unknown = sorted(set(text) - set(vocabulary))
    if unknown:
        print(f"dropped {{len(unknown)}} character(s) outside the vocabulary: {{unknown}}")
    return "".join(c for c in text if c in vocabulary)


ids = tokenizer(known_characters("ROMEO:"), return_tensors="pt").input_ids
room = model.config.n_positions - ids.shape[1]  # prompt and new text together fit the context
out = model.generate(ids, max_new_tokens=min(100, room), do_sample=True, temperature=0.8)
print(tokenizer.decode(out[0]))
```

Positions are learned and absolute, so prompt and generated text together can be at
most {config.block_size} characters here (`n_positions`).

## "WordLevel error: Missing [UNK] token from the vocabulary"

This error from the tokenizer means that the text holds a character the model never
saw in training. Each id is one character of the training text, and there is no
`[UNK]` id to stand for the others, so they cannot be encoded. Drop them first, as
`known_characters` above does, or replace them with characters of the vocabulary
(`tokenizer.get_vocab()` lists all {config.vocab_size}).
"""


TRANSFORMER_LENS_CARD = """
## In TransformerLens

```python
from transformer_lens.model_bridge import TransformerBridge

model = TransformerBridge.boot_transformers("path/to/this/directory", device="cpu")
model.cfg.default_prepend_bos = False  # a character model has no BOS token
logits, cache = model.run_with_cache(model.to_tokens("ROMEO:"))
```
"""


# ---------------------------------------------------------------- bare safetensors


def _write_safetensors(model: GPT, chars: list[str], out: Path) -> None:
    _need("safetensors", "--format safetensors")
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
    _need("safetensors", "loading safetensors")
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


# ---------------------------------------------------------------- the output directory


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} is a file; export into a new directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise UserError(f"{out_dir} already exists and is not empty; export into a new directory")


@contextmanager
def _built_then_renamed(out_dir: Path) -> Iterator[Path]:
    """A hidden sibling directory to write into, renamed to out_dir only once complete."""
    partial = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.partial")
    try:
        partial.mkdir(parents=True)
    except OSError as e:
        raise UserError(f"cannot create {out_dir}: {e.strerror}") from None
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
            f"cannot write the export to {out_dir}: {reason}; nothing was written; free some space "
            "(or fix the directory) and export again"
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


def _need(package: str, purpose: str) -> None:
    try:
        __import__(package)
    except ImportError:
        raise UserError(
            f"{purpose} needs the Python package {package}: pip install 'tinygpt[hf]' "
            "(from a checkout: pip install -e '.[hf]')"
        ) from None
