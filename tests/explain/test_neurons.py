"""Every MLP neuron described (tinygpt.explain.neurons): each reported number against the model run by hand,
the cache beside the checkpoint, and `inspect --neurons` as text, JSON, HTML and one-line errors."""

import json
import shutil

import pytest
import torch
import torch.nn.functional as F

import tinygpt
from tinygpt.app.cli import main
from tinygpt.explain import neurons as measuring
from tinygpt.explain.validation import validation_split_of
from tinygpt.files.checkpoint import read_checkpoint, save_checkpoint
from tinygpt.model import gelu


@pytest.fixture(scope="module")
def checkpoint(odd_checkpoint, tmp_path_factory):
    """The odd run's best.pt alone in a directory of its own, so that its cache/ is this module's."""
    copy = tmp_path_factory.mktemp("neurons") / "best.pt"
    shutil.copy(odd_checkpoint, copy)
    return copy


@pytest.fixture(scope="module")
def lm(checkpoint):
    return tinygpt.load(checkpoint)


@pytest.fixture(scope="module")
def found(lm):
    return lm.neurons().found


def by_hand(model, windows: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each layer's neurons (N·T, 4C) and ln_f's 1/σ at each position (N·T,), module by module, no hook."""
    with torch.no_grad():
        T = windows.size(1) - 1
        x = model.wte.weight[windows[:, :-1]] + model.wpe.weight[:T]  # (N, T, C)
        posts = []
        for block in model.h:
            x = x + block.attn(block.ln_1(x))
            post = gelu(block.mlp.c_fc(block.ln_2(x)))  # (N, T, 4C)
            posts.append(post.flatten(0, 1))
            x = x + block.mlp.c_proj(post)
        inv_sigma = (x.double().var(dim=-1, unbiased=False) + 1e-5).rsqrt().flatten()  # (N·T,)
    return posts, inv_sigma


def test_every_top_activation_is_what_the_model_computes_on_the_text_it_read(lm, found):
    """Each context run alone (the window up to the firing character, at most block_size of them)."""
    block = lm.model.config.block_size
    names = [f"blocks.{layer}.mlp.post" for layer in range(lm.model.config.n_layer)]
    checked = 0
    for seen in {c.seen for n in found.neurons for c in n.contexts}:
        assert 1 <= len(seen) <= block
        _, cache = lm.run_with_cache(seen, names)
        for n in found.neurons:
            for c in n.contexts:
                if c.seen == seen:
                    assert cache[names[n.layer]][0, -1, n.neuron].item() == pytest.approx(c.value, abs=1e-4)
                    checked += 1
    assert checked == sum(len(n.contexts) for n in found.neurons) > 2 * 128


def test_density_and_direct_effect_are_the_hand_computed_ones(lm, found):
    model = lm.model
    val = validation_split_of(lm.checkpoint, model.config.block_size, lm.path)
    windows = measuring.scoring_windows(val, model.config.block_size)
    posts, inv_sigma = by_hand(model, windows)
    assert found.positions == inv_sigma.numel() == measuring.WINDOWS * model.config.block_size
    assert found.inv_sigma == pytest.approx(inv_sigma.mean().item(), rel=1e-5)
    for n in [found.neurons[i] for i in (0, 5, 130, 255)]:
        acts = posts[n.layer][:, n.neuron]  # (N·T,)
        largest = acts.max().item()
        assert n.largest == pytest.approx(largest, abs=1e-5)
        assert n.density == pytest.approx((acts > 0.25 * largest).float().mean().item(), abs=2 / acts.numel())
        w = model.h[n.layer].mlp.c_proj.weight[:, n.neuron].detach().double()  # (C,)
        stream = (
            (w - w.mean()) * inv_sigma.mean() * model.ln_f.weight.detach().double()
        )  # ln_f, its mean scale
        effect = model.lm_head.weight.detach().double() @ stream  # (vocab,)
        torch.testing.assert_close(found.effects[n.layer][n.neuron].double(), effect, atol=1e-5, rtol=1e-4)
        best = lm.checkpoint.chars[int(effect.argmax())]
        assert n.promotes[0][0] == best and n.promotes[0][1] == pytest.approx(effect.max().item(), abs=1e-4)
        assert n.suppresses[0][0] == lm.checkpoint.chars[int(effect.argmin())]


def test_the_cost_is_the_loss_slope_toward_the_mean_and_the_measured_cost_a_real_ablation(lm, found):
    """The estimate is d loss / dε with the activation moved ε of the way to its mean; the one-neuron
    view's measured cost is the loss with it all the way there."""
    model = lm.model
    val = validation_split_of(lm.checkpoint, model.config.block_size, lm.path)
    windows = measuring.scoring_windows(val, model.config.block_size)
    n = max(found.neurons, key=lambda n: abs(n.cost))

    def loss_moved(eps: float) -> float:
        def hook(post, name):
            post = post.clone()
            post[..., n.neuron] += eps * (n.mean - post[..., n.neuron])
            return post

        with torch.no_grad(), model.hooks({f"blocks.{n.layer}.mlp.post": hook}):
            logits, _ = model(windows[:, :-1])
            return F.cross_entropy(logits.flatten(0, 1).double(), windows[:, 1:].flatten()).item()

    slope = (loss_moved(1e-3) - loss_moved(-1e-3)) / 2e-3
    assert abs(n.cost) > 1e-5 and n.cost == pytest.approx(slope, rel=1e-2, abs=1e-6)
    detail = lm.neurons(layer=n.layer, neuron=n.neuron)
    assert detail.neuron.measured == pytest.approx(loss_moved(1.0) - loss_moved(0.0), abs=1e-5)


def compute_calls(monkeypatch) -> list[list[int]]:
    """The layers each forward and backward pass is asked for, from here on."""
    calls = []
    real = measuring.forward_backward

    def counted(model, windows, layers, progress):
        calls.append(list(layers))
        return real(model, windows, layers, progress)

    monkeypatch.setattr(measuring, "forward_backward", counted)
    return calls


def test_the_cache_is_used_when_it_matches_and_rebuilt_when_anything_differs(
    tmp_path, checkpoint, monkeypatch
):
    path = tmp_path / "best.pt"
    shutil.copy(checkpoint, path)
    calls = compute_calls(monkeypatch)
    first = tinygpt.load(path).neurons().found
    again = tinygpt.load(path).neurons(layer=1).found
    assert calls == [[0, 1]] and len(list((tmp_path / "cache").glob("neurons.best.*.layer*.pt"))) == 2
    assert again.neurons == [n for n in first.neurons if n.layer == 1]  # the same records, from the files

    saved = read_checkpoint(path)  # another checkpoint at the same path: new weights
    saved.weights["h.1.mlp.c_proj.weight"] = saved.weights["h.1.mlp.c_proj.weight"] * 2
    save_checkpoint(saved, path)
    changed = tinygpt.load(path).neurons(layer=1).found
    assert calls[-1] == [1] and changed.effects[1][3].tolist() != first.effects[1][3].tolist()
    assert len(list((tmp_path / "cache").glob("neurons.best.*.layer1.pt"))) == 1  # the stale file replaced

    monkeypatch.setattr(measuring, "SETTINGS", {**measuring.SETTINGS, "firing": 0.5})
    monkeypatch.setattr(measuring, "FIRING", 0.5)
    tinygpt.load(path).neurons(layer=1)
    assert calls[-1] == [1]  # other settings: measured again

    (kept,) = (tmp_path / "cache").glob("neurons.best.*.layer1.pt")
    kept.write_bytes(kept.read_bytes()[:100])  # damaged: read as absent, measured again, kept again
    tinygpt.load(path).neurons(layer=1)
    assert len(calls) == 4 and kept.stat().st_size > 1000


def test_the_page_describes_only_the_costliest_and_never_keeps_them_as_whole_layers(
    tmp_path, checkpoint, found, monkeypatch
):
    """With `listed`, a layer's listed costliest are the whole layer's records, kept under their own name;
    a whole layer's file, once `inspect --neurons` writes it, is what the page reads."""
    path = tmp_path / "best.pt"
    shutil.copy(checkpoint, path)
    calls = compute_calls(monkeypatch)
    lm = tinygpt.load(path)
    val = validation_split_of(lm.checkpoint, lm.model.config.block_size, path)

    def page() -> measuring.Neurons:
        return measuring.every_neuron(lm.model, lm.checkpoint.chars, val, path, [0, 1], listed=5)

    partial = page()
    for layer in (0, 1):
        assert measuring.by_cost(partial, layer) == measuring.by_cost(found, layer)[:5]
    assert (partial.positions, partial.loss) == (found.positions, found.loss)
    partial_files = set((tmp_path / "cache").glob("neurons.best.*.layer*.pt"))
    assert len(partial_files) == 2
    assert page().neurons == partial.neurons and calls == [[0, 1]]  # read back, not measured again
    whole = tinygpt.load(path).neurons().found
    assert calls == [[0, 1], [0, 1]] and whole.neurons == found.neurons  # the partial files not read
    whole_files = set((tmp_path / "cache").glob("neurons.best.*.layer*.pt"))
    assert len(whole_files) == 2 and not whole_files & partial_files  # the whole layers replaced them
    assert page().neurons == found.neurons and len(calls) == 2  # the whole layers, read


def test_a_run_directory_that_cannot_be_written_still_gets_its_neurons(tmp_path, checkpoint, monkeypatch):
    path = tmp_path / "best.pt"
    shutil.copy(checkpoint, path)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(measuring, "write_atomic", refuse)
    assert len(tinygpt.load(path).neurons(layer=0).neurons) == 128


def test_inspect_neurons_lists_each_layer_by_cost_and_shows_one_neuron(checkpoint, capsys):
    assert main(["inspect", str(checkpoint), "--neurons", "--layer", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "layer 1: the 20 of 128 neurons that cost most to switch off"
    rows = [line.split() for line in lines[2:22]]
    assert all(row[0].startswith("1.") for row in rows)
    costs = [float(row[1]) for row in rows]
    assert costs == sorted(costs, reverse=True)
    assert main(["inspect", str(checkpoint), "--neurons", "--layer", "1", "--neuron", rows[0][0][2:]]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"neuron {rows[0][0]} (blocks.1.mlp.post[..., {rows[0][0][2:]}])")
    assert "⟦" in text and "measured" in text and "in words: fires on" in text


def test_the_json_has_every_neuron_or_the_one_chosen(checkpoint, capsys):
    assert main(["inspect", str(checkpoint), "--neurons", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert set(every) == {"positions", "loss", "inv_sigma", "firing", "neurons"}
    assert [(n["layer"], n["neuron"]) for n in every["neurons"]] == [
        (a, b) for a in (0, 1) for b in range(128)
    ]
    first = every["neurons"][0]
    assert set(first) == {
        "layer", "neuron", "density", "largest", "mean", "cost", "promotes", "suppresses",
        "explanations", "contexts", "measured",
    }  # fmt: skip
    assert set(first["contexts"][0]) == {"seen", "after", "value"} and len(first["promotes"][0]) == 2
    assert set(first["explanations"][0]) == {"words", "precision", "recall"}
    assert main(["inspect", str(checkpoint), "--neurons", "--layer", "0", "--neuron", "7", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["neuron"]["neuron"] == 7 and one["neuron"]["measured"] is not None


def test_the_notebook_views_draw_a_table_and_the_marked_contexts(lm):
    table = lm.neurons(layer=0)
    page = table._repr_html_()
    assert page.count('class="neuron"') == measuring.ROWS and 'class="tinygpt-neurons"' in page
    top = table.costliest(0)[0]
    assert f"<td>{top.name}</td>" in page.split('class="neuron"')[1]
    detail = lm.neurons(layer=0, neuron=top.neuron)
    drawn = detail._repr_html_()
    assert drawn.count('class="context"') == len(detail.neuron.contexts) > 0
    assert drawn.count("<mark") == len(detail.neuron.contexts)
    assert repr(detail).startswith(f"neuron {top.name} ")


ERRORS = {
    "layer-out-of-range": (["--neurons", "--layer", "2"], "layer 2 does not exist: this model has 2 layers"),
    "neuron-out-of-range": (
        ["--neurons", "--layer", "0", "--neuron", "128"],
        "--neuron 128 does not exist: each layer has 128 neurons (0 … 127)",
    ),
    "neuron-without-neurons": (
        ["--neuron", "3"],
        "--neuron 3 picks a neuron for --neurons to show; add --neurons",
    ),
    "neuron-without-layer": (
        ["--neurons", "--neuron", "3"],
        "--neuron 3 is a neuron of one layer; add --layer",
    ),
    "neurons-with-another-view": (["--neurons", "--heads"], "--neurons is a view of its own"),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_bad_neurons_input_is_one_line(checkpoint, capsys, case):
    args, expected = ERRORS[case]
    assert main(["inspect", str(checkpoint), *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and not captured.out, captured.err
    assert expected in lines[0]


def test_an_attention_only_model_has_no_neurons_or_mlp_dictionary_and_says_so(tmp_path, capsys):
    """inspect --neurons, and features of its default mlp_out, on a model.mlp: false checkpoint: one line."""
    from tinygpt import GPT, GPTConfig
    from tinygpt.files.checkpoint import FORMAT_VERSION, write_payload

    config = GPTConfig(vocab_size=4, block_size=8, n_layer=2, n_head=2, n_embd=8, mlp=False)
    payload = {"format_version": FORMAT_VERSION, "model_config": vars(config), "tokenizer": list("ab c")}
    write_payload({**payload, "model": GPT(config).state_dict()}, tmp_path / "attn_only.pt")
    path = str(tmp_path / "attn_only.pt")
    for args, expected in (
        (["inspect", path, "--neurons"], "it has no neurons to describe"),
        (["features", path], "train a dictionary of the residual stream with --site resid_post"),
    ):
        assert main(args) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and "attention-only (model.mlp: false)" in lines[0] and expected in lines[0]


def test_a_neurons_plain_data_is_what_dataclasses_asdict_gives(found):
    import dataclasses

    assert [n.as_dict() for n in found.neurons] == [dataclasses.asdict(n) for n in found.neurons]
