"""The named hook points: every name reached once per block per pass, in order; reading and replacing."""

import re

import pytest
import torch

import tinygpt.hooks
from tinygpt import GPT, GPTConfig, UserError
from tinygpt.generation import fused_step
from tinygpt.generation.sampling import generate
from tinygpt.hooks import BLOCK_SITES, hook_names

B, T, C, NH, LAYERS, VOCAB = 2, 7, 16, 2, 3, 11


def small_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=VOCAB, block_size=16, n_layer=LAYERS, n_head=NH, n_embd=C)
    return GPT(config).eval()


def shape_of(name: str) -> tuple[int, ...]:
    """The shape the table in tinygpt.hooks gives each name, at B, T above."""
    site = name.split(".", 2)[-1] if name.startswith("blocks.") else name
    if site == "pos_embed":
        return (T, C)
    if site in ("attn.q", "attn.k", "attn.v", "attn.z"):
        return (B, NH, T, C // NH)
    if site == "attn.pattern":
        return (B, NH, T, T)
    if site.startswith("mlp."):
        return (B, T, 4 * C)
    return (B, T, C)


def test_every_hook_point_is_reached_once_per_pass_in_the_order_of_the_table():
    model = small_model()
    seen = []
    with model.hooks({"*": lambda x, name: seen.append((name, tuple(x.shape)))}):
        model(torch.randint(VOCAB, (B, T)))
    assert [name for name, _ in seen] == hook_names(LAYERS)  # each once, in order
    assert len(seen) == 2 + LAYERS * len(BLOCK_SITES) + 1
    assert all(shape == shape_of(name) for name, shape in seen), seen
    assert not model.hook_points.active  # all off again


def test_the_documented_table_lists_exactly_the_names_the_model_has():
    cells = re.findall(r"^\| ([\w.|]+)\s+\|", tinygpt.hooks.__doc__, flags=re.M)  # the first column
    documented = []
    for cell in cells[1:]:  # less the header
        stem, _, last = cell.rpartition(".")  # 'blocks.L.attn', 'q|k|v'
        documented += [f"{stem}.{site}" if stem else site for site in last.split("|")]
    assert documented == ["embed", "pos_embed", *(f"blocks.L.{site}" for site in BLOCK_SITES), "ln_final"]


def test_a_cache_of_a_run_holds_what_the_model_computed():
    model = small_model()
    idx = torch.randint(VOCAB, (B, T))
    logits, found = model.run_with_cache(idx)
    assert set(found) == set(hook_names(LAYERS))
    assert torch.allclose(logits, model(idx)[0], atol=1e-5)  # caught 'pattern': the plain formula ran
    last = f"blocks.{LAYERS - 1}"
    assert torch.allclose(model.lm_head(found["ln_final"]), logits, atol=1e-6)
    assert torch.allclose(found[f"{last}.resid_post"], found[f"{last}.resid_mid"] + found[f"{last}.mlp_out"])
    assert torch.allclose(found["blocks.1.resid_pre"], found["blocks.0.resid_post"])
    assert torch.allclose(found["blocks.0.mlp.post"], torch.nn.functional.gelu(found["blocks.0.mlp.pre"]))
    assert torch.allclose(found["blocks.0.resid_pre"], found["embed"] + found["pos_embed"])


def test_replacing_the_last_stream_gives_the_logits_of_the_stream_put_in_its_place():
    model = small_model()
    stream = torch.randn(B, T, C)
    with model.hooks({f"blocks.{LAYERS - 1}.resid_post": lambda x, name: stream}):
        logits, _ = model(torch.randint(VOCAB, (B, T)))
    assert torch.allclose(logits, model.lm_head(model.ln_f(stream)), atol=1e-6)


def test_patching_the_token_embedding_of_another_prompt_runs_that_prompt():
    model = small_model()
    clean, corrupted = torch.randint(VOCAB, (B, T)), torch.randint(VOCAB, (B, T))
    _, found = model.run_with_cache(clean, names=["embed"])
    with model.hooks({"embed": lambda x, name: found["embed"]}):
        patched, _ = model(corrupted)
    assert torch.allclose(patched, model(clean)[0], atol=1e-6)
    assert not torch.allclose(patched, model(corrupted)[0], atol=1e-3)


def test_replacing_the_weights_reaches_each_heads_output():
    """Uniform weights over the keys so far: each head's output is the running mean of its values."""
    model = small_model()
    mask = torch.tril(torch.ones(T, T))
    uniform = (mask / mask.sum(-1, keepdim=True)).expand(B, NH, T, T)
    with model.hooks({"blocks.1.attn.pattern": lambda w, name: uniform}):
        _, found = model.run_with_cache(
            torch.randint(VOCAB, (B, T)), names=["blocks.1.attn.v", "blocks.1.attn.z"]
        )
    v = found["blocks.1.attn.v"]  # (B, nh, T, hs)
    running_mean = v.cumsum(dim=2) / torch.arange(1, T + 1).view(1, 1, T, 1)
    assert torch.allclose(found["blocks.1.attn.z"], running_mean, atol=1e-6)


def test_hooks_run_in_the_order_attached_and_come_off_after_an_error():
    model = small_model()
    order = []
    with model.hooks({"embed": lambda x, name: order.append("outer")}):
        with model.hooks({"embed": lambda x, name: order.append("inner")}):
            model(torch.randint(VOCAB, (1, T)))
        with pytest.raises(RuntimeError, match="boom"), model.hooks({"ln_final": boom}):
            model(torch.randint(VOCAB, (1, T)))
        assert list(model.hook_points.active) == ["embed"]
    assert order == ["outer", "inner", "outer"] and not model.hook_points.active


def boom(x: torch.Tensor, name: str) -> None:
    raise RuntimeError("boom")


def test_a_name_that_is_no_hook_point_is_refused_in_one_line():
    model = small_model()
    with pytest.raises(UserError, match=r"no hook point is called 'blocks.9.attn.z'.* for L in 0 … 2"):
        with model.hooks({"blocks.9.attn.z": lambda x, name: None}):
            pass
    with pytest.raises(UserError, match="'mlp.pre'"):
        model.run_with_cache(torch.randint(VOCAB, (1, T)), names=["mlp.pre"])
    assert not model.hook_points.active


@pytest.mark.parametrize(
    "replacement, said",
    [
        (
            lambda x: torch.zeros(3),
            "returned a tensor of shape (3,) float32 on cpu, where the activation is "
            f"({B}, {T}, {C}) float32 on cpu; return one of the same shape, dtype and device",
        ),
        (lambda x: x.double(), f"shape ({B}, {T}, {C}) float64 on cpu, where the activation is"),
        (lambda x: x[:, :1], f"shape ({B}, 1, {C}) float32"),  # would broadcast into the next addition
        (lambda x: 5, "returned int, not a tensor; return a tensor of shape"),
    ],
    ids=["shape", "dtype", "broadcastable", "not-a-tensor"],
)
def test_a_replacement_that_cannot_stand_in_its_place_is_refused_naming_the_hook_point(replacement, said):
    """It once failed in layer_norm's words ("Given normalized_shape=[32] …") or ran on, broadcast."""
    model = small_model()
    with (
        pytest.raises(UserError) as caught,
        model.hooks({"blocks.1.resid_mid": lambda x, name: replacement(x)}),
    ):
        model(torch.randint(VOCAB, (B, T)))
    assert str(caught.value).startswith("the hook on blocks.1.resid_mid ") and said in str(caught.value)
    assert not model.hook_points.active


def test_sampling_through_a_hook_that_makes_the_logits_nan_is_refused():
    """The NaN logits were sampled as character 0 every step, silently (the clocks' argmax picks it)."""
    model = small_model()
    prompt = torch.randint(VOCAB, (1, 3))
    for use_cache in (True, False):
        with model.hooks({"blocks.2.mlp_out": lambda x, name: x * float("nan")}):
            with pytest.raises(
                UserError,
                match=r"^the model's logits are no longer numbers \(NaN or infinite\) "
                r"with hooks on blocks.2.mlp_out; make",
            ):
                generate(model, prompt, 5, use_cache=use_cache)
    assert generate(model, prompt, 5).shape == (1, 8)  # the hook off: sampled as before


def test_with_nothing_attached_the_fast_paths_run(monkeypatch):
    model = small_model()

    def formula(*args):
        raise AssertionError("the plain formula ran with nothing watching the weights")

    monkeypatch.setattr("tinygpt.model.attention_pattern", formula)
    model(torch.randint(VOCAB, (B, T)))  # fused attention
    with model.hooks({"blocks.*.attn.z": lambda x, name: None}):  # z is on the fast path too
        model(torch.randint(VOCAB, (B, T)))
    assert fused_step.usable(model, torch.device("cpu"))


def test_a_hook_while_generating_with_the_cache_matches_the_run_without_it():
    """Steering: a hook adding a direction to the stream, on every position, cached or not."""
    model = small_model(seed=1)
    direction = model.wte.weight[5].detach() * 50  # the stream turned toward character 5's embedding
    prompt = torch.randint(VOCAB, (2, 3))
    plain = generate(model, prompt, 10, temperature=0)
    with model.hooks({"blocks.1.resid_mid": lambda x, name: x + direction}):
        cached = generate(model, prompt, 10, temperature=0)
        uncached = generate(model, prompt, 10, temperature=0, use_cache=False)
    assert torch.equal(cached, uncached)
    assert (cached[:, 3:] == 5).all() and not (plain[:, 3:] == 5).all()  # steered: the tied head reads it


def test_generate_on_the_model_says_where_it_went():
    with pytest.raises(AttributeError, match=r"tinygpt.generate\(model, idx, max_new_tokens"):
        small_model().generate(torch.zeros(1, 1, dtype=torch.long), 5)


def test_an_attention_only_model_has_no_mlp_hook_points_and_says_so():
    model = GPT(GPTConfig(vocab_size=5, block_size=8, n_layer=2, n_head=2, n_embd=8, mlp=False)).eval()
    assert model.hook_points.names == hook_names(2, mlp=False)
    assert not [name for name in hook_names(2, mlp=False) if "mlp" in name or "ln2" in name]
    with pytest.raises(UserError, match="attention-only"):
        model.run_with_cache(torch.zeros(1, 3, dtype=torch.long), ["blocks.*.mlp.post"])
