"""A tinygpt model as a Hugging Face transformers GPT-2: weights, config, tokenizer, model card.

`write_hf` writes a directory that `transformers.GPT2LMHeadModel.from_pretrained` and
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
"""

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from tinygpt.errors import UserError
from tinygpt.model import GPT, GPTConfig, LayerNorm

TOLERANCE = 1e-5  # largest |logit difference| allowed, per unit of the largest |logit| (at least 1)
EXPORTABLE = {
    "vocab_size",
    "block_size",
    "n_layer",
    "n_head",
    "n_embd",
    "dropout",
    "attention_dropout",
    "bias",
    "mlp",
}


def check_exportable(model_config: dict[str, Any]) -> None:
    """Refuse a model with an option this exporter does not know how to write exactly."""
    unknown = sorted(set(model_config) - EXPORTABLE)
    if unknown:
        raise UserError(
            f"the checkpoint's model has option(s) {', '.join(unknown)}, which the GPT-2 export "
            "cannot reproduce exactly; not exported"
        )


@torch.no_grad()
def gpt2_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The model's weights under GPT2LMHeadModel's names and layouts.

    The names are the same, under `transformer.`. GPT-2's Conv1D stores a
    weight as (in, out), nn.Linear's (out, in) transposed. Biases that a
    bias=False model lacks are zeros, which add nothing. GPT-2's blocks all
    have an MLP: an attention-only model's are written as zeros, whose output
    is exactly zero (GELU(0) = 0, times zero weights, plus zero biases).
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
    if not model.config.mlp:
        out |= absent_mlps(model.config, model.wte.weight)
    return out


def absent_mlps(config: GPTConfig, like: torch.Tensor) -> dict[str, torch.Tensor]:
    """GPT-2's ln_2 and MLP weights for blocks that have none: an identity ln_2 and all-zero MLPs."""
    C, zeros = config.n_embd, like.new_zeros
    out = {}
    for layer in range(config.n_layer):
        block = f"transformer.h.{layer}"
        out |= {f"{block}.ln_2.weight": like.new_ones(C), f"{block}.ln_2.bias": zeros(C)}
        out |= {f"{block}.mlp.c_fc.weight": zeros(C, 4 * C), f"{block}.mlp.c_fc.bias": zeros(4 * C)}
        out |= {f"{block}.mlp.c_proj.weight": zeros(4 * C, C), f"{block}.mlp.c_proj.bias": zeros(C)}
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
        attn_pdrop=config.dropout if config.attention_dropout else 0.0,
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
    need("transformers", "--format hf")
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
    need("tokenizers", "--format hf")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()  # "".join: no spaces between characters
    return tokenizer


def write_hf(model: GPT, chars: list[str], record: dict, checkpoint: str | Path, out: Path) -> float:
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
    (out / "README.md").write_text(model_card(model.config, record, checkpoint), encoding="utf-8")
    return difference


def model_card(config: GPTConfig, record: dict, checkpoint: str | Path) -> str:
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


def need(package: str, purpose: str) -> None:
    try:
        __import__(package)
    except ImportError:
        raise UserError(
            f"{purpose} needs the Python package {package}: pip install 'tinygpt[hf]' "
            "(from a checkout: pip install -e '.[hf]')"
        ) from None
