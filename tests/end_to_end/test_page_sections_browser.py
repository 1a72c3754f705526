"""The page's attribution, neurons and features sections in headless Chromium, each against Python's numbers.

Attribution: the page computes it from its own forward pass in float64 on the float32 weights, Python from
the model's float32 activations (the parts through ln_f in float64). The two differ by float32 rounding of
the activations, about 1e-6 of values of order 1–10, far under the 1e-4 the logits themselves are held to
(test_page_browser); a wrong part (a missing bias, a head's columns mixed up, σ of the wrong stream) moves a
value by 1e-2 or more.
"""

import pytest
import test_page_browser as base
import torch

from tinygpt.explain.ablate import ablated, validation_means
from tinygpt.explain.attribution import logit_parts
from tinygpt.explain.glyphs import glyph
from tinygpt.explain.page import write_page
from tinygpt.files.checkpoint import load_checkpoint, read_checkpoint

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
