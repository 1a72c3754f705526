"""Direct logit attribution (tinygpt.explain.attribution): the parts add up to the model's own logit, a head's
part is what the trace gives by hand, and `inspect --attribution` prints bars, JSON and one-line errors."""

import json
import random
import shutil
from pathlib import Path

import pytest
import torch

import tinygpt
from tinygpt.app.cli import main
from tinygpt.data.corpus import validation_windows
from tinygpt.explain.attribution import LN_EPS, logit_parts, stream_parts
from tinygpt.explain.features import dictionary_of
from tinygpt.explain.trace import trace_prompt
from tinygpt.explain.validation import validation_split_of
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer


@pytest.fixture(scope="module")
def lm(odd_checkpoint):
    return tinygpt.load(odd_checkpoint)


def validation_cases(lm, count: int, seed: int = 0) -> list[tuple[list[int], int]]:
    """`count` (window ids, position) pairs drawn at random from the checkpoint's validation text."""
    block = lm.model.config.block_size
    windows = validation_windows(validation_split_of(lm.checkpoint, block, lm.path), block, 64)[:, :-1]
    rng = random.Random(seed)
    return [(windows[rng.randrange(len(windows))].tolist(), rng.randrange(block)) for _ in range(count)]


def test_the_parts_add_up_to_the_logit_at_100_random_validation_positions(lm):
    rng = random.Random(1)
    chars = lm.tokenizer.chars
    for ids, position in validation_cases(lm, 100):
        found = logit_parts(lm.model, lm.tokenizer, ids, position, None, None)
        with torch.no_grad():
            logits, _ = lm.model(torch.tensor([ids]))
        assert found.target == chars[int(logits[0, position].argmax())]  # the default: the prediction
        assert found.logit == pytest.approx(float(logits[0, position].max()), abs=1e-6)
        assert abs(found.total - found.logit) < 1e-4
        target, versus = rng.sample(chars, 2)
        difference = logit_parts(lm.model, lm.tokenizer, ids, position, target, versus)
        row = logits[0, position]
        assert difference.logit == pytest.approx(
            float(row[lm.tokenizer.ids[target]] - row[lm.tokenizer.ids[versus]]), abs=1e-6
        )
        assert abs(difference.total - difference.logit) < 1e-4


def test_every_part_is_named_once_in_the_models_order(lm):
    ids, position = validation_cases(lm, 1)[0]
    names = list(logit_parts(lm.model, lm.tokenizer, ids, position, None, None).parts)
    assert names == [
        "embed",
        "pos_embed",
        "0.0",
        "0.1",
        "attn bias 0",
        "mlp 0",
        "1.0",
        "1.1",
        "attn bias 1",
        "mlp 1",
        "ln_f bias",
    ]


def test_a_heads_part_is_its_trace_contribution_through_ln_f_by_hand(lm):
    """Head 1.0's part, computed from the trace's contribution and a final stream built module by module."""
    model, ids, position, target = lm.model, lm.to_tokens("KING:\nThe"), 4, "e"
    trace = trace_prompt(model, ids)
    with torch.no_grad():
        x = trace.tok_emb + trace.pos_emb  # (T, C)
        for block in model.h:  # the forward pass, by hand, with no hook
            x = x + block.attn(block.ln_1(x[None]))[0]
            x = x + block.mlp(block.ln_2(x[None]))[0]
        part = trace.layers[1].contrib[0, position]  # (C,): head 1.0's output through its columns of c_proj
        sigma = (x[position].var(unbiased=False) + LN_EPS).sqrt()
        by_hand = ((part - part.mean()) / sigma * model.ln_f.weight) @ model.lm_head.weight[
            lm.tokenizer.ids[target]
        ]
    found = logit_parts(model, lm.tokenizer, ids, position, target, None)
    assert found.parts["1.0"] == pytest.approx(float(by_hand), abs=1e-5)


def test_a_layers_heads_and_bias_add_up_to_what_the_layer_wrote(lm):
    ids = validation_cases(lm, 1)[0][0]
    idx = torch.tensor([ids])
    names, parts, stream, _ = stream_parts(lm.model, idx)
    _, found = lm.model.run_with_cache(idx, ["blocks.*.attn_out"])
    for layer in range(2):
        mine = [names.index(n) for n in (f"{layer}.0", f"{layer}.1", f"attn bias {layer}")]
        torch.testing.assert_close(parts[mine].sum(0), found[f"blocks.{layer}.attn_out"], atol=1e-5, rtol=0)
    torch.testing.assert_close(parts.sum(0), stream, atol=1e-5, rtol=0)  # every part: the final stream


def test_a_model_without_biases_has_no_bias_parts_and_still_adds_up():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=6, block_size=8, n_layer=2, n_head=2, n_embd=16, bias=False)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)  # away from the initialisation's near-zero logits
    tokenizer = CharTokenizer("abcdef")
    found = logit_parts(model, tokenizer, tokenizer.encode("abcabca"), -2, "b", "c")
    assert not [name for name in found.parts if "bias" in name]
    assert abs(found.total - found.logit) < 1e-4 and abs(found.logit) > 0.1


def test_an_attention_only_model_has_no_mlp_parts_and_still_adds_up():
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=6, block_size=8, n_layer=2, n_head=2, n_embd=16, mlp=False)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    tokenizer = CharTokenizer("abcdef")
    found = logit_parts(model, tokenizer, tokenizer.encode("abcabca"), -1, None, None)
    assert list(found.parts)[:6] == ["embed", "pos_embed", "0.0", "0.1", "attn bias 0", "1.0"]
    assert not [name for name in found.parts if name.startswith("mlp")]
    assert abs(found.total - found.logit) < 1e-4 and abs(found.logit) > 0.1


def test_inspect_attribution_prints_sorted_bars_and_json(odd_checkpoint, capsys):
    best = str(odd_checkpoint)
    assert main(["inspect", best, "--attribution", "--prompt", "KING:\nThe", "--position", "-2"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert "after position 7" in lines[0]  # -2 of 9 characters
    logit, total = (float(w) for w in lines[1].replace(";", "").split() if w[0] in "+-")
    assert abs(logit - total) < 1e-4
    values = [float(line.split()[-2]) for line in lines[2:-1] if "│" in line]
    assert len(values) == 11 and values == sorted(values, reverse=True)
    command = ["inspect", best, "--attribution", "--prompt", "KING:\nThe", "--target", "e", "--versus", "a"]
    assert main([*command, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert set(found) == {"prompt", "position", "target", "versus", "logit", "sum", "parts"}
    assert (found["position"], found["target"], found["versus"]) == (8, "e", "a")
    assert {"embed", "pos_embed", "0.0", "1.1", "mlp 0", "attn bias 1", "ln_f bias"} <= set(found["parts"])
    assert abs(sum(found["parts"].values()) - found["logit"]) < 1e-4


def test_the_notebook_view_draws_a_bar_per_part(lm):
    view = lm.attribution("KING:\nThe", position=3, target="N")
    page = view._repr_html_()
    assert page.count('class="bar"') == len(view.parts) == 11
    assert sum(view.parts.values()) == pytest.approx(view.logit, abs=1e-4)
    assert "the parts&#x27; sum" in page
    assert repr(view).startswith("direct logit attribution on KING:↵The: the logit of 'N' after position 3")


ERRORS = {
    "target-not-in-vocabulary": (
        ["--prompt", "KING:", "--target", "Z"],
        "--target 'Z' is not in the model's",
    ),
    "target-not-one-character": (
        ["--prompt", "KING:", "--target", "ab"],
        "--target 'ab' is not one character",
    ),
    "position-outside-the-prompt": (
        ["--prompt", "KING:", "--position", "5"],
        "--position 5 is outside the prompt of 5 characters: use 0 … 4, or -5 … -1 counting from the end",
    ),
    "versus-is-the-target": (
        ["--prompt", "KING:", "--target", "e", "--versus", "e"],
        "--versus 'e' is --target's character; a difference needs two characters",
    ),
    "attribution-without-prompt": (
        [],
        "--attribution splits the logit at a position of --prompt; add --prompt",
    ),
    "target-without-attribution": (
        ["--target", "e", "--no-attribution"],
        "--target goes with --attribution; add --attribution",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_bad_attribution_input_is_one_line(odd_checkpoint, capsys, case):
    args, expected = ERRORS[case]
    view = [] if "--no-attribution" in args else ["--attribution"]
    args = [a for a in args if a != "--no-attribution"]
    assert main(["inspect", str(odd_checkpoint), *view, *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and not captured.out, captured.err
    assert expected in lines[0]


# ---------------------------------------------------------------- an MLP split into its features


@pytest.fixture(scope="module")
def featured(tiny_run, tmp_path_factory):
    """A copy of the tiny run with a small dictionary of layer 1's mlp_out (none of layer 0's), loaded."""
    copy = Path(shutil.copytree(tiny_run, tmp_path_factory.mktemp("featured") / "run"))
    shutil.rmtree(copy / "features", ignore_errors=True)
    made = ["--layer", "1", "--positions", "2000", "--size", "64", "--k", "4", "--quiet"]
    assert main(["features", str(copy), *made]) == 0
    return tinygpt.load(copy)


def test_features_split_the_mlp_into_what_fired_its_bias_and_its_error_still_adding_up(featured):
    dictionary = dictionary_of(featured.feature_file(1, "mlp_out"))
    for ids, position in validation_cases(featured, 20):
        plain = logit_parts(featured.model, featured.tokenizer, ids, position, None, None)
        split = featured.attribution("".join(plain.tokens), position, features=True).found
        assert split.logit == plain.logit and abs(split.total - split.logit) < 1e-4
        mlp = {name: v for name, v in split.parts.items() if name.startswith("mlp 1 ")}
        assert {name: v for name, v in split.parts.items() if name not in mlp} == pytest.approx(
            {name: v for name, v in plain.parts.items() if name != "mlp 1"}, abs=1e-9
        )  # every other part as it was, mlp 0 (no dictionary) whole
        assert sum(mlp.values()) == pytest.approx(plain.parts["mlp 1"], abs=1e-5)
        _, cache = featured.model.run_with_cache(torch.tensor([ids]), ["blocks.1.mlp_out"])
        with torch.no_grad():
            z = dictionary.encode(cache["blocks.1.mlp_out"][0, position][None])[0]  # (n,)
        fired = [f"mlp 1 feature {f}" for f in z.nonzero().flatten().tolist()]
        assert list(mlp) == [*fired, "mlp 1 dictionary bias", "mlp 1 error"] and len(fired) <= 4


def test_a_features_part_is_its_latent_times_its_decoder_row_through_ln_f_by_hand(featured):
    ids = featured.to_tokens("KING:\nThe fool")
    found = featured.attribution("KING:\nThe fool", features=True).found
    model, t = featured.model, featured.tokenizer.ids[found.target]
    file = featured.feature_file(1, "mlp_out")
    _, cache = model.run_with_cache(torch.tensor([ids]), ["blocks.1.mlp_out", "blocks.1.resid_post"])
    with torch.no_grad():
        z = dictionary_of(file).encode(cache["blocks.1.mlp_out"][0, -1][None])[0]
        stream = cache["blocks.1.resid_post"][0, -1].double()  # the final stream (2 layers)
        sigma = torch.sqrt(stream.var(unbiased=False) + LN_EPS)
        read = model.ln_f.weight.double() * model.lm_head.weight[t].double()
        for f in z.nonzero().flatten().tolist():
            write = z[f].double() * file.W_dec[f].double() / file.input_scale
            by_hand = float((write - write.mean()) @ read / sigma)
            assert found.parts[f"mlp 1 feature {f}"] == pytest.approx(by_hand, abs=1e-5)


def test_inspect_attribution_features_prints_the_split_and_refuses_the_rest(featured, odd_checkpoint, capsys):
    checkpoint = str(featured.path)
    prompt = ["--attribution", "--prompt", "KING:\nThe fool", "--features", "--json"]
    assert main(["inspect", checkpoint, *prompt]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "mlp 1" not in data["parts"] and "mlp 1 error" in data["parts"] and "mlp 0" in data["parts"]
    assert any(name.startswith("mlp 1 feature ") for name in data["parts"])
    assert data["sum"] == pytest.approx(data["logit"], abs=1e-4)
    refused = {
        (str(odd_checkpoint), *prompt): "holds none; make one with tinygpt features",
        (checkpoint, *prompt, "--site", "mlp_out"): "--features goes with --attribution",
        (checkpoint, "--patch", "--clean", "KING:", "--corrupted", "FOOL:", "--features"): "--features goes",
    }
    for args, said in refused.items():
        assert main(["inspect", *args]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], lines
