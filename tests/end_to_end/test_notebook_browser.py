"""The API's views as a notebook shows them (`_repr_html_`), in headless Chromium: several cells in
one document, each view's numbers equal to Python's, the page's own script run in every frame."""

import pytest
import test_page_browser as base
import torch

import tinygpt
from tinygpt.explain.lens import logit_lens

pytestmark = pytest.mark.slow  # headless Chromium

browser, open_page = base.browser, base.open_page  # the same Chromium fixtures as test_page_browser's

PROMPT = 'FOOL:\n<b>Tom & "'
LAYER, HEAD, TOKEN = 1, 0, 8


@pytest.fixture(scope="module")
def notebook(odd_checkpoint, tmp_path_factory):
    """One document holding the views' HTML one after another, as a notebook's cells hold them."""
    lm = tinygpt.load(odd_checkpoint)
    with lm.ablate("0.1"):
        ablated = lm.attention(PROMPT)
    views = {
        "grid": lm.attention(PROMPT),
        "grid_again": lm.attention(PROMPT),  # a second cell of the same view: no id may collide
        "ablated": ablated,
        "lens": lm.lens(PROMPT),
        "walkthrough": lm.walkthrough(PROMPT, LAYER, HEAD, TOKEN),
        "backward": lm.backward(PROMPT, LAYER, HEAD, TOKEN),
        "circuits": lm.circuits(),
        "timeline": tinygpt.timeline(odd_checkpoint.parent),
        "heads": lm.heads(),
    }
    cells = "".join(
        f'<div class="cell" id="cell-{name}">{v._repr_html_()}</div>' for name, v in views.items()
    )
    path = tmp_path_factory.mktemp("notebook") / "notebook.html"
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{cells}</body></html>")
    return path, views, lm


def frame_of(page, name: str):
    """The frame of one cell's view, once its script has run (it hands the tests window.tinygpt)."""
    frame = page.locator(f"#cell-{name} iframe").element_handle().content_frame()
    frame.wait_for_function("() => window.tinygpt && window.tinygpt.state.trace")
    return frame


def test_every_view_runs_in_its_own_frame_and_sizes_it(notebook, open_page):
    path, views, lm = notebook
    page = open_page(path)  # on leaving: no console error from any frame
    ids = [frame.get_attribute("id") for frame in page.locator("iframe").element_handles()]
    assert len(ids) == len(set(ids)) == len(views) - 1  # the heads' table is a plain table
    for name in views:
        if name != "heads":
            frame_of(page, name)
    page.wait_for_function(
        "() => [...document.querySelectorAll('iframe')].every(f => f.style.height !== '480px')"
    )
    for name, section in (
        ("grid", "#grid-section"),
        ("lens", "#prompt-section"),
        ("timeline", "#timeline-section"),
    ):
        frame = frame_of(page, name)
        assert frame.locator(section).is_visible() and not frame.locator("#idea-section").is_visible(), name
    assert frame_of(page, "circuits").locator("#circuits-section").is_visible()
    c = lm.model.config
    for name in ("grid", "grid_again"):
        assert frame_of(page, name).locator("#grid canvas").count() == c.n_layer * c.n_head
    rows = page.locator("#cell-heads table tr")
    assert rows.count() == 1 + c.n_layer * c.n_head
    assert rows.nth(1).locator("b").text_content() == views["heads"].reports[0].label


def test_the_lens_views_numbers_are_pythons(notebook, open_page):
    path, views, lm = notebook
    frame = frame_of(open_page(path), "lens")
    ids = lm.to_tokens(PROMPT)
    js = torch.tensor(frame.evaluate("ids => tinygpt.lens(ids)", ids), dtype=torch.float64)
    assert (js - views["lens"].logits.double()).abs().max().item() < 1e-4
    assert (js - logit_lens(lm.model, ids).double()).abs().max().item() < 1e-4
    assert frame.locator("#tokens .col").count() == len(PROMPT)


def test_the_walkthrough_view_shows_pythons_weights(notebook, open_page):
    path, views, _ = notebook
    frame = frame_of(open_page(path), "walkthrough")
    assert f"Position {TOKEN}" in frame.text_content("#arith .lead")
    shown = [float(x) for x in frame.locator("#arith td.w").all_text_contents()]
    masked = [0.0] * (len(PROMPT) - TOKEN - 1)  # the page lists the later positions too, at weight 0
    assert shown == pytest.approx(views["walkthrough"].row.weights.tolist() + masked, abs=6e-5)


def test_the_backward_view_opens_the_backward_pass_and_its_numbers_are_pythons(notebook, open_page):
    path, views, _ = notebook
    frame = frame_of(open_page(path), "backward")
    assert frame.get_attribute("#backward-toggle", "aria-pressed") == "true"
    js = frame.evaluate("([l, h, i]) => tinygpt.backward(l, h, i)", [LAYER, HEAD, TOKEN])
    python = views["backward"].gradients
    assert js["loss"] == pytest.approx(python.loss, abs=1e-5)
    assert js["dq"] == pytest.approx(python.dq.tolist(), abs=1e-5)


def test_an_ablated_view_starts_with_those_heads_off(notebook, open_page):
    path, views, lm = notebook
    frame = frame_of(open_page(path), "ablated")
    assert frame.evaluate("() => [...tinygpt.state.off]") == ["0.1"]
    ids = lm.to_tokens(PROMPT)
    js = torch.tensor(frame.evaluate("ids => tinygpt.logits(ids, ['0.1'])", ids), dtype=torch.float64)
    assert (js - views["ablated"].logits.double()).abs().max().item() < 1e-4  # Python's, with 0.1 off
    shown = frame.evaluate("() => Array.from(tinygpt.state.trace.logits)")
    assert torch.tensor(shown).view(len(ids), -1).sub(views["ablated"].logits).abs().max() < 1e-4
