"""The page's attribution, neurons and features sections in headless Chromium, each against Python's numbers.

Attribution: the page computes it from its own forward pass in float64 on the float32 weights, Python from
the model's float32 activations (the parts through ln_f in float64). The two differ by float32 rounding of
the activations, about 1e-6 of values of order 1–10, far under the 1e-4 the logits themselves are held to
(test_page_browser); a wrong part (a missing bias, a head's columns mixed up, σ of the wrong stream) moves a
value by 1e-2 or more.
"""

import shutil

import pytest
import test_page_browser as base
import torch

import tinygpt
from tinygpt.app.cli import main
from tinygpt.explain import neurons as measuring
from tinygpt.explain.ablate import ablated, validation_means
from tinygpt.explain.attribution import logit_parts
from tinygpt.explain.feature_notes import SHADING_DIGITS, ranked
from tinygpt.explain.feature_text import QUALITY_ROWS, headline, summary
from tinygpt.explain.glyphs import glyph
from tinygpt.explain.page import write_page
from tinygpt.explain.page_sections import FEATURES, NEURONS
from tinygpt.files.checkpoint import load_checkpoint, read_checkpoint
from tinygpt.files.feature_file import read_features

pytestmark = pytest.mark.slow  # headless Chromium

browser, open_page = base.browser, base.open_page  # the same Chromium fixtures as test_page_browser's

PROMPT = 'FOOL:\n<b>Tom & "'
TOLERANCE = 1e-4  # float64 in the page against float32 activations in Python: see the module's docstring


@pytest.fixture(scope="module")
def page_file(odd_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("sections_page") / "page.html"
    write_page(odd_checkpoint, PROMPT, out, 1, 0)
    return out


def shown_parts(page) -> list[tuple[str, float]]:
    rows = page.locator("#attribution .part")
    return [(r.get_attribute("data-part"), float(r.get_attribute("data-value"))) for r in rows.all()]


def test_clicking_a_position_shows_its_attribution_as_python_has_it(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    ids = tokenizer.encode(PROMPT)
    for t in (8, 0, len(ids) - 1):
        page.click(f'#tokens .tok[data-pos="{t}"]')
        found = logit_parts(model, tokenizer, ids, t, None, None)
        shown = shown_parts(page)
        assert [name for name, _ in shown] == sorted(found.parts, key=lambda name: -found.parts[name])
        assert len(shown) == 2 + 2 * (2 + 1 + 1) + 1  # embeddings; a layer: 2 heads, bias, MLP; ln_f bias
        for name, value in shown:
            assert value == pytest.approx(found.parts[name], abs=TOLERANCE), (t, name)
        box = page.locator("#attribution")
        assert float(box.get_attribute("data-logit")) == pytest.approx(found.logit, abs=TOLERANCE)
        assert float(box.get_attribute("data-sum")) == pytest.approx(found.total, abs=TOLERANCE)
        lead = page.text_content("#attribution .lead")
        assert f"After position {t}" in lead and f'predicts "{glyph(found.target)}"' in lead
        assert f"its logit {found.logit:.4f}" in lead


def test_attribution_follows_a_typed_prompt_and_heads_switched_off(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    saved = read_checkpoint(odd_checkpoint)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    means = validation_means(model, saved, odd_checkpoint)
    text = "KING:\nTh😀 café"
    ids = tokenizer.encode(text)
    for off, mode in (([], "zero"), ([(0, 1)], "zero"), ([(1, 0), (0, 0)], "mean")):
        names = [f"{layer}.{head}" for layer, head in off]
        for t in (3, len(ids) - 1):
            js = page.evaluate("([ids, t, off, mode]) => tinygpt.attribution(ids, t, off, mode)",
                               [ids, t, names, mode])  # fmt: skip
            with ablated(model, off, mode, means):
                found = logit_parts(model, tokenizer, ids, t, None, None)
            assert found.total == pytest.approx(found.logit, abs=1e-4)  # Python's parts are the ablated run's
            assert js["target"] == found.target and js["parts"].keys() == found.parts.keys()
            for name, value in js["parts"].items():
                assert value == pytest.approx(found.parts[name], abs=TOLERANCE), (off, t, name)
            assert js["logit"] == pytest.approx(found.logit, abs=TOLERANCE)
    # in the page itself: type the prompt, switch head 0.1 off, and the bars are the ablated run's
    page.fill("#prompt-input", text)
    page.click('#grid button.role[data-layer="0"][data-head="1"]')
    page.click(f'#tokens .tok[data-pos="{len(ids) - 1}"]')
    with ablated(model, [(0, 1)]):
        found = logit_parts(model, tokenizer, ids, len(ids) - 1, None, None)
    for name, value in shown_parts(page):
        assert value == pytest.approx(found.parts[name], abs=TOLERANCE), name
    assert "switched off: 0.1" in page.text_content("#attribution .lead")
    with torch.no_grad():
        intact = logit_parts(model, tokenizer, ids, len(ids) - 1, None, None)
    assert abs(intact.parts["0.1"] - found.parts["0.1"]) > 1e-3, "switching 0.1 off changes its part"


def test_the_neurons_section_lists_pythons_costliest_neurons(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    found = tinygpt.load(odd_checkpoint).neurons().found  # what the page measured: the same windows
    for layer in (1, 0):
        page.click(f'#neurons button.layer-pick[data-layer="{layer}"]')
        expected = measuring.by_cost(found, layer)[:NEURONS]
        rows = page.locator("#neuron-list tr[data-neuron]").all()
        assert [int(r.get_attribute("data-neuron")) for r in rows] == [n.neuron for n in expected]
        for row, n in zip(rows, expected, strict=True):
            assert float(row.locator("td.cost").get_attribute("data-value")) == n.cost
            assert float(row.locator("td.density").get_attribute("data-value")) == n.density
            assert row.locator("td.words").text_content() == n.words
            assert row.locator("td.promotes").text_content() == measuring.characters(n.promotes)
        assert f"The {len(expected)} of layer {layer}'s {4 * 32} neurons" in page.text_content(
            "#neurons .note"
        )
    n = measuring.by_cost(found, 0)[2]
    page.click(f'#neuron-list tr[data-neuron="{n.neuron}"]')
    detail = page.locator("#neuron-detail")
    assert detail.locator("h3").text_content() == f"Neuron 0.{n.neuron}"
    contexts = detail.locator(".context").all()
    assert [c.text_content() for c in contexts] == [measuring.marked(c).replace("⟦", "").replace("⟧", "")
                                                    for c in n.contexts]  # fmt: skip
    assert [c.locator("mark").text_content() for c in contexts] == [glyph(c.seen[-1]) for c in n.contexts]
    assert f"costs {n.cost:+.5f} nats" in detail.text_content()


def test_without_feature_files_the_features_section_says_how_to_make_them(page_file, open_page):
    page = open_page(page_file)
    note = page.text_content("#features-note")
    assert "this run has no feature files" in note and "make them with tinygpt features " in note
    assert page.locator("#feature-list").count() == 0


@pytest.fixture(scope="module")
def feature_run(tiny_run, tmp_path_factory):
    """A copy of the tiny run with a small feature file of layer 1's mlp_out, made by the command."""
    run = tmp_path_factory.mktemp("features_page") / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("features", "neurons"))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert (
            main(["features", str(run), "--positions", "20000", "--size", "128", "--k", "8", "--quiet"]) == 0
        )
    finally:
        torch.set_num_threads(before)
    return run


def test_the_features_section_browses_the_runs_feature_file(feature_run, tmp_path, open_page):
    write_page(feature_run / "best.pt", "the ", tmp_path / "f.html")
    page = open_page(tmp_path / "f.html")
    features = read_features(
        feature_run / "features" / "mlp_out.1.pt", read_checkpoint(feature_run / "best.pt"), ""
    )
    expected = ranked(features.features)[:FEATURES]
    assert page.text_content("#features .lead") == headline(features)
    rows = page.locator("#feature-list tr[data-feature]").all()
    assert [int(r.get_attribute("data-feature")) for r in rows] == [note["feature"] for note in expected]
    for row, note in zip(rows, expected, strict=True):
        assert float(row.locator("td.density").get_attribute("data-value")) == note["density"]
        assert row.locator("td.words").text_content() == summary(note)
    quality = page.locator("#features table.quality tr").all()[1:]
    assert [r.locator("td").first.text_content() for r in quality] == [words for _, words, _ in QUALITY_ROWS]
    note = expected[0]
    page.click(f'#feature-list tr[data-feature="{note["feature"]}"]')
    detail = page.locator("#feature-detail")
    assert [int(b.get_attribute("data-count")) for b in detail.locator(".bin").all()] == note["histogram"]
    promoted = "  ".join(f"{glyph(c)} {value:+.3f}" for c, value in note["promoted"])
    assert detail.locator("p.effect").first.text_content() == f"promotes  {promoted}"
    contexts = detail.locator(".context").all()
    assert len(contexts) == len(note["contexts"]) > 0
    for shown, cx in zip(contexts, note["contexts"], strict=True):
        chars = shown.locator(".ch").all()
        assert "".join(c.text_content() for c in chars) == "".join(glyph(c) for c in cx["text"])
        acts = [float(c.get_attribute("data-act")) for c in chars]
        firing = shown.locator(".ch.firing")
        assert firing.count() == 1 and float(firing.get_attribute("data-act")) == acts[cx["index"]]
        # the activation at the character the note found it at is the note's own value, kept to
        # SHADING_DIGITS decimals along the context (tests/explain/test_features.py recomputes them)
        assert acts[cx["index"]] == pytest.approx(cx["value"], abs=10**-SHADING_DIGITS)
        assert max(acts) <= note["max"] + 10**-SHADING_DIGITS  # no character of a context beyond its largest
