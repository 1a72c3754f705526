"""The page's head roles, switching heads off, the logit lens, the backward panel and its layout,
in headless Chromium, each checked against Python's own numbers."""

import pytest
import test_page_browser as base
import torch

from tinygpt import GPT, GPTConfig
from tinygpt.attention import attention
from tinygpt.explain.ablate import ablated, validation_means
from tinygpt.explain.backward import STEP_LR, row_backward, step_effect
from tinygpt.explain.glyphs import glyph
from tinygpt.explain.heads import checkpoint_heads
from tinygpt.explain.lens import logit_lens
from tinygpt.explain.page import write_page
from tinygpt.explain.trace import trace_prompt
from tinygpt.files.checkpoint import FORMAT_VERSION, load_checkpoint, read_checkpoint, write_payload

pytestmark = pytest.mark.slow  # headless Chromium

browser, open_page = base.browser, base.open_page  # the same Chromium fixtures as test_page_browser's
cell_centre, shown_weights = base.cell_centre, base.shown_weights

PROMPT = 'FOOL:\n<b>Tom & "'
LAYER, HEAD = 1, 0


@pytest.fixture(scope="module")
def page_file(odd_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("heads_page") / "page.html"
    write_page(odd_checkpoint, PROMPT, out, LAYER, HEAD)
    return out


def top5(logits: torch.Tensor) -> list[int]:
    return torch.softmax(logits.double(), dim=-1).topk(5).indices.tolist()


def test_each_heatmap_is_labelled_with_its_role(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    for report in checkpoint_heads(odd_checkpoint).reports:
        label = page.locator(f'#grid button.role[data-layer="{report.layer}"][data-head="{report.head}"]')
        text = label.text_content()
        assert text.split()[0] == report.label
        if report.label != "mixed":
            assert text == f"{report.label} {report.scores[report.label]:.2f}"
        assert f"previous {report.scores['previous']:.3f}" in label.get_attribute("title")


def test_ablated_forward_pass_equals_python(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    ids = tokenizer.encode(PROMPT)
    for off in ([(0, 1)], [(1, 0), (0, 0)], [(0, 0), (0, 1), (1, 0), (1, 1)]):
        names = [f"{layer}.{head}" for layer, head in off]
        js = torch.tensor(page.evaluate("([ids, off]) => tinygpt.logits(ids, off)", [ids, names]))
        with ablated(model, off), torch.no_grad():
            reference, _ = model(torch.tensor([ids]))
        assert (js - reference[0].double()).abs().max().item() < 1e-4, names
        with torch.no_grad():
            intact, _ = model(torch.tensor([ids]))
        assert (js - intact[0].double()).abs().max().item() > 1e-3, f"switching {names} off changes nothing"


def test_clicking_a_label_switches_the_head_off_and_back_on(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    ids = tokenizer.encode(PROMPT)
    before = page.locator("#tokens .col").first.locator(".guess .ch").all_text_contents()
    page.click('#grid button.role[data-layer="0"][data-head="0"]')
    assert page.text_content('#grid button.role[data-layer="0"][data-head="0"]').startswith("off · ")
    assert "Switched off: 0.0." in page.text_content("#ablation-note")
    with ablated(model, [(0, 0)]):
        trace = trace_prompt(model, ids)
    # the walkthrough of layer 1 head 0 reads the weights computed without head 0.0
    page.click(f'#tokens .tok[data-pos="{len(ids) - 1}"]')
    expected = trace.layers[LAYER].weights[HEAD, len(ids) - 1].tolist()
    assert shown_weights(page) == pytest.approx(expected, abs=6e-5)
    # the predictions too
    for t, column in enumerate(page.locator("#tokens .col").all()):
        shown = column.locator(".guess .ch").all_text_contents()
        assert shown[0] == glyph(tokenizer.chars[top5(trace.logits[t])[0]]), t
    # the selected head's walkthrough says it adds nothing
    page.locator('#grid canvas[data-layer="0"][data-head="0"]').click(
        position=cell_centre(page.locator('#grid canvas[data-layer="0"][data-head="0"]'), 4, 0)
    )
    assert "head 0.0 is switched off" in page.text_content("#arith")
    page.click('#grid button.role[data-layer="0"][data-head="0"]')
    assert page.text_content("#ablation-note") == ""
    assert page.locator("#tokens .col").first.locator(".guess .ch").all_text_contents() == before


def test_logit_lens_equals_python_and_its_last_layer_the_prediction(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    for text in (PROMPT, "KING:\nTh"):
        ids = tokenizer.encode(text)
        js = torch.tensor(page.evaluate("ids => tinygpt.lens(ids)", ids), dtype=torch.float64)
        lens = logit_lens(model, ids).double()  # (L, T, vocab)
        assert (js - lens).abs().max().item() < 1e-4, text
    ids = tokenizer.encode(PROMPT)
    lens = logit_lens(model, ids)
    for t, column in enumerate(page.locator("#tokens .col").all()):
        rows = column.locator(".lens-row").all()
        assert len(rows) == model.config.n_layer
        for layer, row in enumerate(rows):
            probs = torch.softmax(lens[layer, t].double(), dim=-1)
            top = probs.topk(5)
            assert row.locator(".lc").all_text_contents() == [glyph(tokenizer.chars[j]) for j in top.indices]
            shown = [float(p) for p in row.locator(".lc").evaluate_all("cs => cs.map(c => c.dataset.p)")]
            assert shown == pytest.approx(top.values.tolist(), abs=1e-5)
        # the last layer's lens is the model's own prediction, shown above it
        assert rows[-1].locator(".lc").all_text_contents() == column.locator(".guess .ch").all_text_contents()


def test_backward_panel_equals_python(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    ids = tokenizer.encode(PROMPT)
    page.click("#backward-toggle")
    for layer, head, i in ((1, 0, 8), (0, 1, 13), (0, 0, 0)):
        js = page.evaluate("([l, h, i]) => tinygpt.backward(l, h, i)", [layer, head, i])
        rb = row_backward(model, ids, layer, head, i)
        assert js["target"] == rb.target and js["loss"] == pytest.approx(rb.loss, abs=1e-6)
        for name in ("dlogits", "g", "w", "dw", "ds", "ddot", "dq"):
            got = torch.tensor(js[name], dtype=torch.float64)
            assert (got - getattr(rb, name).flatten().cpu()).abs().max().item() < 1e-6, name
        for name in ("dv", "dk"):
            got = torch.tensor(js[name], dtype=torch.float64).view(i + 1, -1)
            assert (got - getattr(rb, name).cpu()).abs().max().item() < 1e-6, name
    page.locator(f'#grid canvas[data-layer="{LAYER}"][data-head="{HEAD}"]').click(
        position=cell_centre(page.locator(f'#grid canvas[data-layer="{LAYER}"][data-head="{HEAD}"]'), 8, 0)
    )
    rb = row_backward(model, ids, LAYER, HEAD, 8)
    shown = [float(x) for x in page.locator("#arith td.ds").all_text_contents()]
    assert shown == pytest.approx(rb.ds.tolist(), abs=1e-4)
    assert f"L = −ln p = {rb.loss:.4f}" in page.text_content("#arith")
    page.fill("#prompt-input", "KING:\nTh")
    assert "computed when the page was written" in page.text_content("#arith")
    page.fill("#prompt-input", PROMPT)
    page.click('#tokens .tok[data-pos="8"]')
    assert page.locator("#arith td.ds").count() == 9, "the written prompt typed again shows it again"


def test_backward_panel_step_7_equals_pythons_step_effect(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    ids = tokenizer.encode(PROMPT)
    page.click("#backward-toggle")
    for layer, head, i in ((1, 0, 8), (0, 1, 13), (1, 1, 3)):
        js = page.evaluate("([l, h, i]) => tinygpt.backward(l, h, i)", [layer, head, i])
        step = step_effect(model, ids, layer, head, i, STEP_LR)
        assert (torch.tensor(js["w"], dtype=torch.float64) - step.before).abs().max().item() < 1e-6
        assert (torch.tensor(js["after"], dtype=torch.float64) - step.after).abs().max().item() < 1e-6
        assert js["loss"] == pytest.approx(step.loss, abs=1e-6)
        assert js["lossAfter"] == pytest.approx(step.loss_after, abs=1e-6)
    canvas = page.locator(f'#grid canvas[data-layer="{LAYER}"][data-head="{HEAD}"]')
    canvas.click(position=cell_centre(canvas, 8, 0))
    step = step_effect(model, ids, LAYER, HEAD, 8, STEP_LR)
    shown = [float(x) for x in page.locator("#arith td.w-after").all_text_contents()]
    assert shown == pytest.approx(step.after.tolist(), abs=1e-4)
    assert f"loss {step.loss:.4f} → {step.loss_after:.4f}" in page.text_content("#arith")
    assert f"7. One plain gradient step of size {STEP_LR}" in page.text_content("#arith")


def test_mean_ablated_forward_pass_equals_python(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    means = validation_means(model, read_checkpoint(odd_checkpoint), odd_checkpoint)
    ids = tokenizer.encode(PROMPT)
    for off in ([(0, 1)], [(1, 0), (0, 0)], [(0, 0), (0, 1), (1, 0), (1, 1)]):
        names = [f"{layer}.{head}" for layer, head in off]
        run = "([ids, off, mode]) => tinygpt.logits(ids, off, mode)"
        js = torch.tensor(page.evaluate(run, [ids, names, "mean"]))
        with ablated(model, off, "mean", means), torch.no_grad():
            reference, _ = model(torch.tensor([ids]))
        assert (js - reference[0].double()).abs().max().item() < 1e-4, names
        zero = torch.tensor(page.evaluate(run, [ids, names, "zero"]))
        assert (js - zero).abs().max().item() > 1e-3, f"mean and zero ablation of {names} agree"


def test_switching_the_mode_changes_the_predictions(odd_checkpoint, page_file, open_page):
    page = open_page(page_file)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    means = validation_means(model, read_checkpoint(odd_checkpoint), odd_checkpoint)
    ids = tokenizer.encode(PROMPT)

    def shown() -> list[list[float]]:  # each column's five probabilities, as written in their titles
        titles = [
            c.locator(".guess").evaluate_all("gs => gs.map(g => g.title)")
            for c in page.locator("#tokens .col").all()
        ]
        return [[float(t.rsplit(": ", 1)[1]) for t in column] for column in titles]

    page.click('#grid button.role[data-layer="0"][data-head="1"]')
    zero = shown()
    assert "zero ablation" in page.text_content("#ablation-note")
    page.check('#ablation-mode input[value="mean"]')
    mean = shown()
    assert mean != zero
    assert "mean ablation" in page.text_content("#ablation-note")
    with ablated(model, [(0, 1)], "mean", means):
        trace = trace_prompt(model, ids)
    for t, column in enumerate(mean):
        top = torch.softmax(trace.logits[t].double(), dim=-1).topk(5).values.tolist()
        assert column == pytest.approx(top, abs=1e-4), t
    page.click('#grid canvas[data-layer="0"][data-head="1"]')
    assert "its mean output over validation text" in page.text_content("#arith")
    page.check('#ablation-mode input[value="zero"]')
    assert shown() == zero


def test_the_worked_example_is_attention_pys(page_file, open_page):
    page = open_page(page_file)
    q = torch.tensor([[1.0, 0.5]])
    k = torch.tensor([[1.0, 0.0], [0.5, 1.0], [1.5, 1.0]])
    v = torch.tensor([[0.5, 1.0], [1.0, 0.0], [1.5, 1.0]])
    out, weights = attention(q, k, v, causal=False)
    assert page.text_content("#example-output") == "[" + ", ".join(f"{x:.4f}" for x in out[0].tolist()) + "]"
    shown = [float(x) for x in page.locator("#example td.w").all_text_contents()]
    assert shown == pytest.approx(weights[0].tolist(), abs=5e-5)
    assert "softmax" in page.text_content("#idea-section") and "√d" in page.text_content("#idea-section")


def test_newline_reads_as_an_arrow_everywhere(page_file, open_page):
    page = open_page(page_file)
    page.click('#tokens .tok[data-pos="5"]')  # the newline
    assert 'Position 5, "↵"' in page.text_content("#arith .lead")
    assert "\\n" not in page.text_content("main")
    canvas = page.locator(f'#grid canvas[data-layer="{LAYER}"][data-head="{HEAD}"]')
    canvas.hover(position=cell_centre(canvas, 5, 5))
    assert 'query 5 "↵" → key 5 "↵"' in page.text_content("#tooltip")


def test_retyping_hides_the_old_tooltip(page_file, open_page):
    page = open_page(page_file)
    canvas = page.locator(f'#grid canvas[data-layer="{LAYER}"][data-head="{HEAD}"]')
    canvas.hover(position=cell_centre(canvas, 8, 2))
    assert page.is_visible("#tooltip")
    page.fill("#prompt-input", "KING")
    assert page.is_hidden("#tooltip")


@pytest.fixture(scope="module")
def long_page(tmp_path_factory):
    """A page for a model of 4 heads and block 128, untrained, written for a prompt of 128 characters."""
    root = tmp_path_factory.mktemp("long_page")
    torch.manual_seed(0)
    chars = list("\n abcdefghijklmnopqrstuvwxyz,.:;'!?ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    config = GPTConfig(vocab_size=len(chars), block_size=128, n_layer=2, n_head=4, n_embd=32, bias=False)
    payload = {"format_version": FORMAT_VERSION, "model_config": vars(config), "tokenizer": chars}
    write_payload({**payload, "model": GPT(config).state_dict()}, root / "long.pt")
    line = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer "
    text = (line * 3)[:128]
    write_page(root / "long.pt", text, root / "long.html")
    return root / "long.html"


@pytest.mark.parametrize("width", [800, 1400])
def test_layout_cuts_nothing(long_page, open_page, width):
    page = open_page(long_page)
    page.set_viewport_size({"width": width, "height": 1200})
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"), (
        "the page is wider than the window"
    )
    spills = page.evaluate(
        """() => {
        const out = [];
        const inside = (a, b) => a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1
          && a.bottom <= b.bottom + 1;
        const boxOf = (id) => document.getElementById(id).getBoundingClientRect();
        for (const card of document.querySelectorAll('#grid .card')) {
          const box = card.getBoundingClientRect(), name = card.dataset.layer + '.' + card.dataset.head;
          if (!inside(box, boxOf('grid-section'))) out.push('card ' + name);
          for (const child of card.querySelectorAll('*'))
            if (!inside(child.getBoundingClientRect(), box)) out.push(child.tagName + ' in ' + name);
        }
        for (const col of document.querySelectorAll('#tokens .col'))
          if (!inside(col.getBoundingClientRect(), boxOf('prompt-section')))
            out.push('token column ' + col.querySelector('.tok').dataset.pos);
        return out;
      }"""
    )
    assert spills == []
    assert page.locator("#grid .card").count() == 2 * 4
    assert arithmetic_spills(page) == []


def arithmetic_spills(page) -> list[str]:
    """What of 'the arithmetic of one row' lies outside its box, or makes it scroll sideways."""
    return page.evaluate(
        """() => {
        const arith = document.getElementById('arith'), box = arith.getBoundingClientRect(), out = [];
        if (arith.scrollWidth > arith.clientWidth) out.push('scrolls sideways');
        for (const node of arith.querySelectorAll('*')) {
          const r = node.getBoundingClientRect();
          if (r.width && (r.left < box.left - 1 || r.right > box.right + 1))
            out.push(node.tagName + ': ' + node.textContent.slice(0, 40));
        }
        return out;
      }"""
    )


@pytest.mark.parametrize("width", [800, 1400])
def test_every_step_of_the_arithmetic_fits_the_window(page_file, open_page, width):
    page = open_page(page_file)
    page.set_viewport_size({"width": width, "height": 1200})
    page.click("#backward-toggle")
    page.locator("#tokens .tok").nth(3).click()  # a position with a backward pass
    steps = page.locator("#arith h3").all_text_contents()
    assert any(s.startswith("6. Output") for s in steps) and any(s.startswith("7. One plain") for s in steps)
    assert arithmetic_spills(page) == []


def test_a_wide_window_gives_the_maps_its_width_and_readable_axes(page_file, open_page):
    page = open_page(page_file)
    page.set_viewport_size({"width": 1400, "height": 1200})
    grid = page.evaluate("document.getElementById('grid').clientWidth")
    for layer in (0, 1):
        cards = page.evaluate(
            """(layer) => Array.from(document.querySelectorAll(`#grid .card[data-layer="${layer}"]`),
              (card) => { const c = card.querySelector('canvas'), r = c.getBoundingClientRect();
                return [card.getBoundingClientRect().width, r.width, c.width, +c.dataset.font]; })""",
            layer,
        )
        assert sum(card for card, *_ in cards) > 0.9 * grid  # the layer's cards share the grid's width
        for _, shown, drawn, font in cards:
            assert shown > 0.8 * (grid / len(cards) - 40)  # each map nearly fills its card
            assert font * shown / drawn >= 12  # the axis characters, in screen pixels


@pytest.mark.parametrize("width", [800, 1400])
def test_lens_cells_and_embedding_labels_are_readable(odd_checkpoint, page_file, open_page, width):
    page = open_page(page_file)
    page.set_viewport_size({"width": width, "height": 1200})
    cells = page.evaluate(
        """() => Array.from(document.querySelectorAll('#tokens .lens-row .lc'), (c) =>
          [parseFloat(getComputedStyle(c).fontSize), c.scrollWidth <= c.clientWidth])"""
    )
    assert cells and all(size >= 12 and whole for size, whole in cells)
    overlaps = page.evaluate(
        """() => {
        const labels = document.querySelectorAll('#pca text.char');
        const boxes = Array.from(labels, (t) => [t.textContent, t.getBBox()]);
        const out = [];
        for (let a = 0; a < boxes.length; a++)
          for (let b = a + 1; b < boxes.length; b++) {
            const [p, q] = [boxes[a][1], boxes[b][1]];
            const w = Math.min(p.x + p.width, q.x + q.width) - Math.max(p.x, q.x);
            const h = Math.min(p.y + p.height, q.y + q.height) - Math.max(p.y, q.y);
            if (w > 1 && h > 1) out.push(boxes[a][0] + boxes[b][0]);
          }
        return [boxes.length, out];
      }"""
    )
    assert overlaps == [len(base.model_vocab(odd_checkpoint)), []]  # every character, none covering another
