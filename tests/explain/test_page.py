"""The explainer page as a file: self-contained, escaped, carrying the model's own numbers."""

import base64
import json
import re
import shutil

import pytest
import torch

from tinygpt.app.cli import build_parser, main
from tinygpt.explain.ablate import validation_means
from tinygpt.explain.backward import STEP_LR, head_output_gradients, step_effect
from tinygpt.explain.heads import checkpoint_heads
from tinygpt.explain.lens import logit_lens
from tinygpt.explain.page import PACK_LIMIT, loss_curves, page_data, page_script, render_page, write_page
from tinygpt.explain.pca import principal_components
from tinygpt.explain.roles import WORDS
from tinygpt.explain.trace import trace_prompt
from tinygpt.files.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint

PROMPT = '<b>Tom & "J'


def floats(t: dict) -> torch.Tensor:
    """A tensor as the page carries it, read back."""
    raw = bytearray(base64.b64decode(t["b64"]))
    return torch.frombuffer(raw, dtype=torch.float32).view(t["shape"])


def embedded(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="tinygpt-data">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


@pytest.mark.parametrize("pack_limit", [PACK_LIMIT, 0])  # the float16 page carries its worker's script too
def test_page_is_one_self_contained_file(odd_checkpoint, tmp_path, pack_limit):
    out = tmp_path / "page.html"
    message = write_page(odd_checkpoint, PROMPT, out, layer=1, head=1, token=3, pack_limit=pack_limit)
    assert "runs the model itself" in message and ("Web Worker" in message) == (pack_limit == 0)
    html = out.read_text(encoding="utf-8")
    assert not re.search(
        r"""(src|href)\s*=|<link|@import|url\(|fetch\(|XMLHttpRequest|https?://(?!www\.w3\.org/2000/svg)""",
        html,
    )
    assert html.count("<script") == 3 and html.count("</script>") == 3, (
        "the data and the worker's script cannot close their script elements"
    )
    assert "<title>tinygpt explainer · run/best.pt</title>" in html
    data = embedded(html)
    assert data["prompt"] == PROMPT and data["selection"] == {"layer": 1, "head": 1, "token": 3}
    assert "<" not in html[html.index('id="tinygpt-data">') + 18 : html.index("</script>")]


def test_live_page_carries_every_weight(odd_checkpoint):
    data = page_data(odd_checkpoint, PROMPT)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    assert data["trace"] is None and data["vocab"] == tokenizer.chars
    for name, p in model.named_parameters():
        assert torch.equal(floats(data["weights"][name]), p.detach())
    assert "lm_head.weight" not in data["weights"], "the LM head is the token embedding, sent once"


def test_large_models_carry_the_prompts_trace_instead(odd_checkpoint):
    data = page_data(odd_checkpoint, PROMPT, live_limit=1000)
    assert data["weights"] is None
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    trace = trace_prompt(model, tokenizer.encode(PROMPT))
    sent = data["trace"]
    assert sent["ids"] == trace.ids
    assert torch.equal(floats(sent["logits"]), trace.logits)
    for layer, lt in zip(sent["layers"], trace.layers, strict=True):
        for key, value in layer.items():
            assert torch.equal(floats(value), getattr(lt, key)), key
    lens = logit_lens(model, trace.ids)  # (n_layer, T, vocab)
    assert torch.equal(floats(sent["lens"]), lens)
    last = floats(sent["lens"])[-1]
    assert torch.allclose(last, trace.logits, atol=1e-5), "the last layer's lens is the prediction"


def test_metrics_beside_the_checkpoint(odd_checkpoint, tmp_path):
    rows = loss_curves(odd_checkpoint.parent)
    assert [r["step"] for r in rows] == [0, 10, 20, 30]
    assert rows[-1]["val_loss"] < rows[0]["val_loss"]
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(odd_checkpoint, lone / "model.pt")
    data = page_data(lone / "model.pt", "KING")
    assert data["metrics"] is None and data["metrics_note"] == "no metrics.jsonl beside model.pt"
    (lone / "metrics.jsonl").write_text('{"step": 5, "train_loss": 2.5, "val_loss": 2.6}\n{"step": 10, "tra')
    assert loss_curves(lone) == [{"step": 5.0, "train_loss": 2.5, "val_loss": 2.6}], (
        "a torn last line is skipped"
    )


def test_pca_finds_the_main_directions():
    torch.manual_seed(0)
    t = torch.linspace(-1, 1, 20)
    x = torch.stack([3 * t, -3 * t, 0.1 * torch.randn(20), torch.zeros(20)], dim=1)  # (20, 4): mostly a line
    coords, share = principal_components(x)
    assert share[0] > 0.99 and share.sum() <= 1.0 + 1e-6
    expected = (x - x.mean(0)) @ torch.tensor([1.0, -1.0, 0, 0]) / 2**0.5
    assert torch.allclose(coords[:, 0].abs(), expected.abs(), atol=0.05)
    one, share_one = principal_components(torch.randn(1, 4))  # a single character: nothing to spread
    assert one.shape == (1, 2) and share_one.tolist() == [0.0, 0.0]


def test_render_page_escapes_the_title():
    data = {"run": "<x>", "checkpoint": "a&b.pt", "prompt": "</script>"}
    html = render_page(data)
    assert "<title>tinygpt explainer · &lt;x&gt;/a&amp;b.pt</title>" in html
    assert embedded(html) == data


def test_explain_html_from_the_command_line(odd_checkpoint, tmp_path, capsys):
    out = tmp_path / "p.html"
    assert main(["explain", str(odd_checkpoint), "--prompt", "KING", "--html", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out} (")
    assert embedded(out.read_text(encoding="utf-8"))["prompt"] == "KING"
    assert (
        main(["explain", str(odd_checkpoint), "--prompt", "KING", "--html", str(tmp_path / "no" / "p.html")])
        == 2
    )
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("token", [-5, 4])
def test_page_checks_the_token(odd_checkpoint, token):
    from tinygpt.errors import UserError

    with pytest.raises(UserError, match="outside the prompt"):
        page_data(odd_checkpoint, "KING", token=token)


def test_a_negative_token_on_the_page_counts_from_the_end(odd_checkpoint):
    assert page_data(odd_checkpoint, "KING", token=-1) == page_data(odd_checkpoint, "KING", token=3)


def test_page_carries_each_heads_role(odd_checkpoint):
    data = page_data(odd_checkpoint, PROMPT)
    roles = data["roles"]
    assert data["role_words"] == WORDS  # what the page says each label means: the roles' own records
    reports = checkpoint_heads(odd_checkpoint).reports
    assert [(r["layer"], r["head"]) for r in roles] == [(r.layer, r.head) for r in reports]
    for role, report in zip(roles, reports, strict=True):
        assert role["label"] == report.label and role["scores"] == report.scores
        assert role["entropy"] == pytest.approx(report.entropy)


def test_a_checkpoint_without_its_corpus_gets_a_page_without_roles(tmp_path):
    from tinygpt import GPT, GPTConfig
    from tinygpt.files.checkpoint import FORMAT_VERSION, write_payload

    config = GPTConfig(vocab_size=3, block_size=8, n_layer=1, n_head=2, n_embd=8)
    payload = {"format_version": FORMAT_VERSION, "model_config": vars(config), "tokenizer": list("ab ")}
    write_payload({**payload, "model": GPT(config).state_dict()}, tmp_path / "bare.pt")
    data = page_data(tmp_path / "bare.pt", "ab a")
    assert data["roles"] is None
    note = data["roles_note"]
    assert note.startswith("no head roles: ") and "does not say which corpus" in note


def test_page_carries_the_gradients_for_the_backward_panel(odd_checkpoint):
    data = page_data(odd_checkpoint, PROMPT)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    ids = tokenizer.encode(PROMPT)
    assert data["backward"]["ids"] == ids
    assert torch.equal(floats(data["backward"]["g"]), head_output_gradients(model, ids).float())


def test_page_carries_step_7_for_every_head_and_position(odd_checkpoint):
    data = page_data(odd_checkpoint, PROMPT, lr=0.5)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    ids = tokenizer.encode(PROMPT)
    step = data["backward"]["step"]
    after, loss_after = floats(step["after"]), floats(step["loss_after"])  # (T − 1, L, nh, T), (T − 1, L, nh)
    c = model.config
    assert step["lr"] == 0.5
    assert (
        after.shape == (len(ids) - 1, c.n_layer, c.n_head, len(ids)) and loss_after.shape == after.shape[:3]
    )
    for layer, head, i in ((1, 0, 8), (0, 1, 0), (1, 1, len(ids) - 2)):
        expected = step_effect(model, ids, layer, head, i, 0.5)
        assert (after[i, layer, head, : i + 1].double() - expected.after).abs().max().item() < 1e-6
        assert after[i, layer, head, i + 1 :].abs().sum().item() == 0, "nothing beyond key i"
        assert abs(loss_after[i, layer, head].item() - expected.loss_after) < 1e-6
        assert expected.loss_after < expected.loss, "a small step lowers the loss"


def test_page_carries_the_heads_mean_outputs_for_mean_ablation(odd_checkpoint, tmp_path):
    data = page_data(odd_checkpoint, PROMPT)
    model, _, _ = load_checkpoint(odd_checkpoint)
    means = validation_means(model, read_checkpoint(odd_checkpoint), odd_checkpoint)
    assert data["means_note"] is None
    assert torch.equal(floats(data["means"]), torch.stack(means))  # (n_layer, C)
    lone = tmp_path / "lone"
    lone.mkdir()
    saved = read_checkpoint(odd_checkpoint)
    saved.config = None  # which corpus it came from: no longer known
    save_checkpoint(saved, lone / "best.pt")
    bare = page_data(lone / "best.pt", PROMPT)
    assert bare["means"] is None and bare["means_note"].startswith("no mean ablation: ")


def test_explain_html_takes_the_size_of_step_7(odd_checkpoint, tmp_path, capsys):
    out = tmp_path / "p.html"
    assert main(["explain", str(odd_checkpoint), "--prompt", "KING", "--html", str(out), "--lr", "0.25"]) == 0
    assert embedded(out.read_text(encoding="utf-8"))["backward"]["step"]["lr"] == 0.25
    assert main(["explain", str(odd_checkpoint), "--prompt", "KING", "--html", str(out), "--lr", "-1"]) == 2
    assert capsys.readouterr().err.endswith("error: --lr -1.0 is not a positive number; use e.g. 0.1\n")
    assert build_parser().parse_args(["explain"]).lr == STEP_LR, "the page and the terminal: one default"


def test_writing_the_page_says_what_it_is_doing(odd_checkpoint, tmp_path, capsys):
    write_page(odd_checkpoint, PROMPT, tmp_path / "p.html", progress=True)
    err = capsys.readouterr().err
    steps = ("scoring each head's role", "mean output", "the gradients for the backward panel", "for step 7")
    for step in (*steps, "packing the weights"):
        assert step in err


def test_every_python_name_the_pages_javascript_mirrors_exists():
    """A JavaScript function that mirrors a Python one names it (`// mirrors tinygpt.attention.attention`):
    each name must still be there, so that a rename in Python is seen here."""
    import importlib
    from pathlib import Path

    assets = Path(__file__).resolve().parents[2] / "src" / "tinygpt" / "explain" / "assets"
    named = {name for js in assets.glob("*.js") for name in re.findall(r"tinygpt(?:\.\w+)+", js.read_text())}
    assert "tinygpt.attention.attention" in named
    for name in sorted(named):  # a module, or an attribute of one (a missing module raises)
        obj = importlib.import_module("tinygpt")
        for attribute in name.split(".")[1:]:
            obj = getattr(obj, attribute, None) or importlib.import_module(f"{obj.__name__}.{attribute}")


def test_the_pages_script_declares_each_function_once_and_draws_nothing_on_import():
    """The modules share one script's scope: a second `function f` would silently replace the first
    (a second const or let the browser refuses, which the browser tests see). And every module draws
    only when main.js calls it: no module but main.js has a statement of its own at the top level."""
    script = page_script()
    functions = re.findall(r"^(?:async )?function\*? ?(\w+)", script, re.MULTILINE)
    assert "renderTimeline" in functions and "renderCircuits" in functions
    assert sorted(f for f in set(functions) if functions.count(f) > 1) == []
    modules = re.split(r"^// (\w+\.js)\n", script, flags=re.MULTILINE)[1:]
    for name, text in zip(modules[::2], modules[1::2], strict=True):
        if name == "main.js":
            continue
        top = r"^(?![ )}\]]|//|const |let |function |async function |$).*"  # a line that declares nothing
        assert re.findall(top, text, re.MULTILINE) == [], name
