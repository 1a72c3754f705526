"""The logit lens: what each layer already predicts.

After every block the residual stream is sent straight to the final layer norm and
the LM head, as if the model ended there: lens[l] = lm_head(ln_f(x after block l)).
The last layer's lens is the model's own prediction; earlier ones show how the
guess for the next character forms, layer by layer.
"""

import torch

from tinygpt.explain.glyphs import glyph, pad
from tinygpt.model import GPT
from tinygpt.tokenizer import CharTokenizer


@torch.no_grad()
def logit_lens(model: GPT, ids: list[int]) -> torch.Tensor:
    """(n_layer, T, vocab): the logits each layer's residual stream gives through ln_f and lm_head."""
    model.eval()
    _, found = model.run_with_cache(
        torch.tensor([ids], device=model.wte.weight.device), ["blocks.*.resid_post"]
    )
    streams = [found[f"blocks.{layer}.resid_post"][0] for layer in range(model.config.n_layer)]  # (T, C) each
    return torch.stack([model.lm_head(model.ln_f(x)) for x in streams])  # (L, T, vocab)


def lens_view(lens: torch.Tensor, ids: list[int], tokenizer: CharTokenizer, k: int = 5) -> str:
    """For each position, one line per layer: its k likeliest next characters and their probabilities."""
    probs = torch.softmax(lens.float(), dim=-1)  # (L, T, vocab)
    top = probs.topk(min(k, tokenizer.vocab_size), dim=-1)
    width = len(str(len(ids) - 1))
    lines = [
        f"logit lens: the top {top.indices.size(-1)} next characters, as if the model ended after each layer"
    ]
    for t, token in enumerate(ids):
        lines.append(f"{t:>{width}} {pad(glyph(tokenizer.chars[token]), 2)}")
        for layer in range(lens.size(0)):
            guesses = "  ".join(
                f"{pad(glyph(tokenizer.chars[j]), 2)} {p:.3f}"
                for p, j in zip(top.values[layer, t].tolist(), top.indices[layer, t].tolist(), strict=True)
            )
            lines.append(f"{'':>{width}}   layer {layer} → {guesses}")
    return "\n".join(lines)
