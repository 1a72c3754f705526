"""A checkpoint in TransformerLens: its hooks, activation cache, patching and head detectors on your model.

TransformerLens 4 runs a Hugging Face transformers model inside its
`TransformerBridge` (its HookedTransformer is gone), so the way in is the GPT-2
that tinygpt's Hugging Face export builds (tinygpt.app.hf): the same weights, the
exact GELU, a tokenizer with one id per character. Two things a character model
needs said to TransformerLens:

- no beginning-of-sequence token: TransformerLens prepends one by default, and
  the id it would use is outside the model's vocabulary, so the bridge is given
  `cfg.default_prepend_bos = False` (a directory booted by hand needs the same line);
- TransformerLens tries its tokenizer on the text "a" when it loads a model, so a
  vocabulary without the letter "a" cannot be loaded: refused, with that reason.

`transformer_lens_model(checkpoint)` gives the bridge in memory;
`tinygpt export CKPT --format transformer-lens OUT` writes the directory that
`TransformerBridge.boot_transformers(OUT)` loads, after loading it so and checking
that its logits equal tinygpt's within TOLERANCE.

A run's feature dictionary goes to SAELens, TransformerLens's library of sparse
autoencoders, as its TopK SAE (`sae_lens_files`; `tinygpt export CKPT --format
sae-lens OUT` writes it), read at the TransformerLens hook point of tinygpt's.
"""

from pathlib import Path

import torch

from tinygpt.app.hf import character_tokenizer, check_exportable, to_gpt2
from tinygpt.errors import UserError
from tinygpt.files.checkpoint import read_checkpoint
from tinygpt.files.feature_file import FeatureFile
from tinygpt.model import GPT

TOLERANCE = 1e-4  # largest |logit difference| from tinygpt's allowed, in TransformerLens
PROBED_TEXT = "a"  # what TransformerLens encodes to learn how its tokenizer treats special tokens
SAE_LENS_LAYOUT = "6.54.12"  # the SAELens release whose saved SAE (cfg.json) this writes; its loader
# reads metadata.sae_lens_version to tell its own layout (6.0 on) from older ones

TRANSFORMER_LENS_CARD = """
## In TransformerLens

```python
from transformer_lens.model_bridge import TransformerBridge

model = TransformerBridge.boot_transformers("path/to/this/directory", device="cpu")
model.cfg.default_prepend_bos = False  # a character model has no BOS token
logits, cache = model.run_with_cache(model.to_tokens("ROMEO:"))
```
"""


def transformer_lens_model(checkpoint: str | Path, device: str = "cpu"):
    """A TransformerLens TransformerBridge running the checkpoint's model (eval mode, no BOS token)."""
    saved = read_checkpoint(checkpoint)
    return bridge_for(saved.build_model(checkpoint).eval(), saved.chars, device)


def check_loadable(model_config: dict, chars: list[str]) -> None:
    """Refuse what TransformerLens cannot load: an option the GPT-2 export cannot write, or no "a"."""
    check_exportable(model_config)
    if PROBED_TEXT not in chars:
        raise UserError(
            f"TransformerLens tries its tokenizer on the text {PROBED_TEXT!r} when it loads a model, and "
            f"this checkpoint's vocabulary has no {PROBED_TEXT!r}, so TransformerLens cannot load it; "
            "train on a corpus that has the letter a"
        )


def bridge_for(model: GPT, chars: list[str], device: str = "cpu"):
    """The model as a TransformerBridge: its Hugging Face GPT-2, booted by TransformerLens."""
    check_loadable(vars(model.config), chars)
    _need_transformer_lens()
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerFast

    hf_model = to_gpt2(model)
    hf_model.config.architectures = ["GPT2LMHeadModel"]  # how TransformerLens picks its GPT-2 adapter
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=character_tokenizer(chars))
    bridge = TransformerBridge.boot_transformers(
        "tinygpt", hf_model=hf_model, tokenizer=tokenizer, device=device
    )
    bridge.cfg.default_prepend_bos = False  # a character model has no BOS token
    return bridge.eval()


def boot_directory(directory: Path, device: str = "cpu"):
    """What `--format transformer-lens` wrote, booted by TransformerLens's own loader."""
    _need_transformer_lens()
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(str(directory), device=device)
    bridge.cfg.default_prepend_bos = False
    return bridge.eval()


@torch.no_grad()
def logit_difference(model: GPT, bridge, seed: int = 0) -> float:
    """Largest |logit difference| between tinygpt and the bridge on two random full-length sequences."""
    generator = torch.Generator().manual_seed(seed)
    c = model.config
    idx = torch.randint(c.vocab_size, (2, c.block_size), generator=generator)  # (B, T)
    ours, _ = model(idx)  # (B, T, vocab)
    theirs = bridge(idx, return_type="logits")  # (B, T, vocab)
    return (ours - theirs).abs().max().item()


def check_directory(model: GPT, directory: Path) -> float:
    """Boot an exported directory in TransformerLens; its logits must be tinygpt's within TOLERANCE."""
    difference = logit_difference(model, boot_directory(directory))
    if not difference <= TOLERANCE:
        raise UserError(
            f"TransformerLens's logits for the exported model differ from tinygpt's by {difference:.2e}, "
            f"more than {TOLERANCE:g}; nothing was written"
        )
    return difference


def lens_hook_name(layer: int, site: str) -> str:
    """TransformerLens's name of tinygpt's hook point `blocks.L.SITE` (mlp_out, resid_post; docs/hooks.md)."""
    return f"blocks.{layer}.hook_{site}"


def sae_lens_files(features: FeatureFile, context_size: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """A feature file as SAELens's TopK SAE: what its cfg.json holds, and its sae_weights.safetensors.

    SAELens encodes z = relu(topk((x − b_dec) @ W_enc + b_enc)) and decodes z @ W_dec + b_dec, in the
    layer's own units; tinygpt multiplies x by input_scale s before encoding and divides the reconstruction
    by s. So s is folded in: W_enc·s, W_dec/s, b_dec/s, b_enc as it is, and the latents are the same.
    """
    s = features.input_scale
    tensors = {
        "W_enc": features.W_enc * s,  # (d, n)
        "b_enc": features.b_enc,  # (n,)
        "W_dec": features.W_dec / s,  # (n, d)
        "b_dec": features.b_dec / s,  # (d,)
    }
    n, d = features.W_dec.shape
    metadata = {
        "sae_lens_version": SAE_LENS_LAYOUT,
        "model_name": "tinygpt",
        "hook_name": lens_hook_name(features.layer, features.site),
        "hook_head_index": None,
        "prepend_bos": False,  # a character model has no BOS token
        "context_size": context_size,
    }
    cfg = {
        "architecture": "topk",
        "d_in": d,
        "d_sae": n,
        "k": features.k,
        "rescale_acts_by_decoder_norm": False,
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "dtype": "float32",
        "device": "cpu",
        "metadata": metadata,
    }
    return cfg, {name: t.detach().float().contiguous() for name, t in tensors.items()}


def _need_transformer_lens() -> None:
    try:
        import transformer_lens  # noqa: F401
    except ImportError:
        raise UserError(
            "TransformerLens is not installed: pip install 'tinygpt[lens]' "
            "(from a checkout: pip install -e '.[lens]')"
        ) from None
