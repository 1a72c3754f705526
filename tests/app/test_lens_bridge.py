"""The model in TransformerLens: its logits, attention patterns and own head detector agree with tinygpt's."""

import sys

import pytest
import torch
from conftest import need_extra

from tinygpt import GPT, GPTConfig
from tinygpt.app.cli import main
from tinygpt.app.export import export
from tinygpt.app.lens_bridge import (
    TOLERANCE,
    boot_directory,
    bridge_for,
    logit_difference,
    transformer_lens_model,
)
from tinygpt.errors import UserError
from tinygpt.explain.roles import Boundaries, role_scores
from tinygpt.files.checkpoint import FORMAT_VERSION, write_payload
from tinygpt.model import attention_weights
from tinygpt.tokenizer import CharTokenizer

CHARS = sorted(set("\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
TEXT = "KING:\nWhat say'st thou, fool? a word"  # shorter than block_size: the head detector needs it


def random_model(bias: bool = True, chars: list[str] = CHARS, mlp: bool = True) -> GPT:
    """Every weight random and large (biases and norm gains too): attention far from uniform."""
    torch.manual_seed(0)
    sizes = dict(vocab_size=len(chars), block_size=48, n_layer=2, n_head=4, n_embd=32)
    model = GPT(GPTConfig(**sizes, bias=bias, mlp=mlp))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model.eval()


def write_checkpoint(path, model: GPT, chars: list[str] = CHARS) -> None:
    write_payload(
        {
            "format_version": FORMAT_VERSION,
            "model_config": vars(model.config),
            "model": model.state_dict(),
            "tokenizer": chars,
            "record": {"step": 7, "val_loss": 1.5},
        },
        path,
    )


@pytest.mark.parametrize("bias, mlp", [(True, True), (False, True), (True, False)])
def test_transformer_lens_gives_tinygpt_logits_and_attention_patterns(tmp_path, bias, mlp):
    """Also for an attention-only model (mlp=False), whose GPT-2 MLPs are written as zeros."""
    need_extra("transformer_lens", "lens")
    model = random_model(bias, mlp=mlp)
    write_checkpoint(tmp_path / "m.pt", model)
    bridge = transformer_lens_model(tmp_path / "m.pt")
    tokens = bridge.to_tokens(TEXT)  # (1, T): one id per character, no BOS
    assert tokens[0].tolist() == CharTokenizer(CHARS).encode(TEXT)
    logits, cache = bridge.run_with_cache(tokens)
    ours, _ = model(tokens)
    assert (logits - ours).abs().max().item() <= TOLERANCE
    for layer, weights in enumerate(attention_weights(model, tokens)):  # tinygpt's explicit path
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # (1, nh, T, T)
        assert pattern.shape == weights.shape
        assert (pattern - weights).abs().max().item() < 1e-5


def test_the_previous_token_head_detector_agrees_with_tinygpts_previous_scores():
    """TransformerLens's "mul" score: the weight on i − 1 summed over all T rows (row 0 has none), over T.

    tinygpt's `previous` averages the same weights over the T − 1 queries that have an i − 1.
    """
    need_extra("transformer_lens", "lens")
    from transformer_lens.head_detector import detect_head

    model = random_model()
    bridge = bridge_for(model, CHARS)
    theirs = detect_head(bridge, TEXT, "previous_token_head")  # (n_layer, n_head)
    ids = torch.tensor([CharTokenizer(CHARS).encode(TEXT)])  # (1, T)
    T = ids.size(1)
    none = Boundaries(word=[], line=[])
    ours = torch.stack([role_scores(w, ids, none)["previous"] for w in attention_weights(model, ids)])
    assert theirs.shape == ours.shape
    assert torch.allclose(theirs, ours * (T - 1) / T, atol=1e-5)
    assert len(set(ours.flatten().tolist())) == ours.numel()  # no two heads alike: the match is head by head


def test_the_transformer_lens_export_boots_with_transformer_lens_s_own_loader(tmp_path, capsys):
    need_extra("transformer_lens", "lens")
    model = random_model()
    write_checkpoint(tmp_path / "m.pt", model)
    out = tmp_path / "lens"
    assert main(["export", str(tmp_path / "m.pt"), str(out), "--format", "transformer-lens"]) == 0
    assert "TransformerLens's logits match tinygpt's within" in capsys.readouterr().out
    bridge = boot_directory(out)  # TransformerBridge.boot_transformers(out), then no BOS
    assert logit_difference(model, bridge, seed=1) <= TOLERANCE
    assert "TransformerBridge.boot_transformers" in (out / "README.md").read_text()


def test_a_vocabulary_transformer_lens_cannot_load_is_refused_with_the_reason(tmp_path):
    chars = [c for c in CHARS if c != "a"]
    write_checkpoint(tmp_path / "m.pt", random_model(chars=chars), chars)
    with pytest.raises(UserError, match="TransformerLens tries its tokenizer on the text 'a'"):
        export(tmp_path / "m.pt", tmp_path / "lens", "transformer-lens")
    assert not (tmp_path / "lens").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]  # no partial directory left


def test_without_transformer_lens_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformer_lens", None)
    model = random_model()
    with pytest.raises(UserError, match=r"pip install 'tinygpt\[lens\]'"):
        bridge_for(model, CHARS)
