import math

import pytest
import torch

from tinygpt import GPT, GPTConfig


def small_model(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=11, block_size=16, n_layer=3, n_head=4, n_embd=32, dropout=0.0)
    return GPT(GPTConfig(**(config | overrides))).eval()


def test_forward_shapes_and_initial_loss_near_uniform():
    model = small_model()
    idx = torch.randint(11, (2, 16))
    logits, loss = model(idx, torch.randint(11, (2, 16)))
    assert logits.shape == (2, 16, 11)
    assert abs(loss.item() - math.log(11)) < 0.1  # an untrained model is close to uniform
    logits, loss = model(idx)
    assert loss is None
    logits, _ = model(idx, last_only=True)
    assert logits.shape == (2, 1, 11)


def test_parameter_names_follow_gpt2_and_head_is_tied():
    model = small_model()
    names = set(model.state_dict())
    for name in [
        "wte.weight",
        "wpe.weight",
        "h.0.ln_1.weight",
        "h.0.attn.c_attn.weight",
        "h.0.attn.c_proj.bias",
        "h.2.mlp.c_fc.weight",
        "h.2.mlp.c_proj.weight",
        "ln_f.bias",
        "lm_head.weight",
    ]:
        assert name in names
    assert model.lm_head.weight is model.wte.weight
    # counted by hand, the tied matrix once: wte 11·32 + wpe 16·32 + per block (qkv 3·32² + 3·32,
    # attn.c_proj 32² + 32, mlp 2·4·32² + 4·32 + 32, two layer norms 2·2·32) × 3 + ln_f 2·32
    assert model.num_params() == 352 + 512 + 3 * (3168 + 1056 + 8352 + 128) + 64 == 39_040
    assert sum(t.numel() for t in model.state_dict().values()) == 39_040 + 11 * 32  # lists the tie twice


def test_gpt2_initialisation():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=500, block_size=256, n_layer=4, n_head=4, n_embd=256))
    assert model.wte.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.h[0].attn.c_attn.weight.std().item() == pytest.approx(0.02, rel=0.05)
    residual = 0.02 / math.sqrt(2 * 4)
    assert model.h[1].mlp.c_proj.weight.std().item() == pytest.approx(residual, rel=0.05)
    assert model.h[1].attn.c_proj.weight.std().item() == pytest.approx(residual, rel=0.05)
    assert (model.h[0].attn.c_attn.bias == 0).all() and (model.h[3].ln_2.weight == 1).all()


def test_no_bias_variant_has_no_bias_parameters():
    model = small_model(bias=False)
    assert not any(name.endswith("bias") for name in model.state_dict())


def test_an_attention_only_model_has_no_mlps_and_adds_only_attention_to_the_stream():
    model = small_model(mlp=False)
    assert not [name for name in model.state_dict() if ".mlp." in name or ".ln_2." in name]
    assert model.num_params() == small_model().num_params() - 3 * (2 * 32 + 8 * 32 * 32 + 4 * 32 + 32)
    idx = torch.randint(11, (2, 16))
    logits, found = model.run_with_cache(idx, ["blocks.*.resid_mid", "blocks.*.resid_post"])
    for layer in range(3):  # nothing is added after attention
        assert torch.equal(found[f"blocks.{layer}.resid_post"], found[f"blocks.{layer}.resid_mid"])
    x = model.wte.weight[idx] + model.wpe.weight[:16]  # the forward by hand: attention blocks, ln_f, head
    for block in model.h:
        x = x + block.attn(block.ln_1(x))
    assert torch.allclose(logits, model.lm_head(model.ln_f(x)), atol=1e-5)


def test_dropout_runs_at_its_three_places_while_training_and_not_at_all_in_eval():
    model = small_model(dropout=0.5)
    calls = []
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.register_forward_hook(lambda *_: calls.append(1))
    idx = torch.randint(11, (2, 16))
    model.train()
    first, second = model(idx)[0], model(idx)[0]
    assert len(calls) == 2 * (1 + 2 * 3)  # embeddings, then attention and MLP in each of 3 blocks
    assert not torch.equal(first, second)
    calls.clear()
    model.eval()
    without = small_model(dropout=0.0)
    without.load_state_dict(model.state_dict())
    assert torch.equal(model(idx)[0], without(idx)[0]) and not calls


@pytest.mark.parametrize("attention_dropout", [True, False])
def test_attention_dropout_false_drops_nothing_from_the_attention_weights_and_keeps_the_rest(
    monkeypatch, attention_dropout
):
    """model.attention_dropout: false leaves the weights whole on both attention paths (the fused kernel
    is asked for no dropout, the plain formula drops nothing), while the embeddings and residual
    branches are still dropped."""
    model = small_model(dropout=0.5, attention_dropout=attention_dropout).train()
    asked = []
    fused = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, dropout_p=0.0, **kwargs):
        asked.append(dropout_p)
        return fused(*args, dropout_p=dropout_p, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    idx = torch.randint(11, (2, 16))
    assert not torch.equal(model(idx)[0], model(idx)[0])  # the other dropouts still draw
    assert asked == [0.5 if attention_dropout else 0.0] * 6  # 3 blocks, 2 passes
    names = ["blocks.0.attn.pattern", "blocks.0.attn.v", "blocks.0.attn.z"]  # watched: the plain formula
    cache = model.run_with_cache(idx, names=names)[1]
    pattern, v, z = (cache[name] for name in names)  # (B, nh, T, T), (B, nh, T, hs), (B, nh, T, hs)
    assert torch.allclose(z, pattern @ v, atol=1e-6) != attention_dropout  # dropped weights differ


def test_fast_and_explicit_attention_paths_give_the_same_logits():
    model = small_model()
    idx = torch.randint(11, (3, 16))
    fast, _ = model(idx)
    with model.hooks({"blocks.*.attn.pattern": lambda weights, name: None}):  # the plain formula runs
        explicit, _ = model(idx)
    assert torch.allclose(fast, explicit, atol=1e-5)


@pytest.mark.parametrize("explicit", [False, True])
def test_a_block_asked_for_its_last_positions_computes_those_alone_and_the_same_numbers(explicit):
    model = small_model()
    x = torch.randn(2, 12, 32)
    block = model.h[2]
    whole = block(x)  # (2, 12, 32)
    seen = {}

    def shape(t: torch.Tensor, name: str) -> None:
        seen[name] = t.shape

    sites = ["attn.q", "attn.k", "mlp.post"] + (
        ["attn.pattern"] if explicit else []
    )  # else torch's fused path
    hooks = {f"blocks.2.{site}": shape for site in sites}
    with torch.no_grad(), model.hooks(hooks):
        for last in (1, 5, 12):
            seen.clear()
            assert torch.allclose(block(x, last=last), whole[:, -last:], atol=1e-6)
            assert seen["blocks.2.attn.q"] == (2, 4, last, 8) and seen["blocks.2.attn.k"] == (2, 4, 12, 8)
            assert seen["blocks.2.mlp.post"] == (2, last, 128)  # the MLP ran on the asked positions only
            if explicit:
                assert seen["blocks.2.attn.pattern"] == (2, 4, last, 12)


def test_the_explicit_path_shows_what_each_layer_computed():
    model = small_model()
    idx = torch.randint(11, (1, 10))
    _, found = model.run_with_cache(idx, names=["blocks.1.attn.*", "blocks.1.attn_out"])
    rec = {site: found[f"blocks.1.attn.{site}"] for site in ("q", "k", "v", "pattern", "z")}
    assert rec["pattern"].shape == (1, 4, 10, 10)
    assert torch.allclose(rec["pattern"].sum(-1), torch.ones(1, 4, 10))
    assert torch.allclose(rec["z"], rec["pattern"] @ rec["v"], atol=1e-6)
    merged = rec["z"].transpose(1, 2).reshape(1, 10, 32)
    assert torch.allclose(model.h[1].attn.c_proj(merged), found["blocks.1.attn_out"], atol=1e-6)
    assert not model.hook_points.active  # back on the fast path after the run


def test_stopping_at_a_layer_runs_the_blocks_before_it_alone_and_returns_their_stream():
    model = small_model()
    idx = torch.randint(11, (2, 10))
    seen = []
    with torch.no_grad(), model.hooks({"blocks.*.resid_post": lambda x, name: seen.append(name)}):
        _, whole = model.run_with_cache(idx, names=["blocks.*.resid_post", "embed"])
        seen.clear()
        for layer in range(4):
            stream, loss = model(idx, stop_at_layer=layer)
            entering = whole[f"blocks.{layer - 1}.resid_post"] if layer else whole["embed"] + model.wpe(10)
            assert loss is None and torch.equal(stream, entering)
            assert seen == [f"blocks.{i}.resid_post" for i in range(layer)]  # no block after it ran
            seen.clear()
    with pytest.raises(ValueError, match="stop_at_layer"):
        model(idx, targets=idx, stop_at_layer=1)


def test_too_long_input_is_rejected():
    with pytest.raises(ValueError, match="block_size"):
        small_model()(torch.zeros(1, 17, dtype=torch.long))
