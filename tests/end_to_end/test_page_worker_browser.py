"""A large model's page in headless Chromium: float16 weights, the model run in a Web Worker (or, with
no worker to be had, on the page's thread), checked against Python. Forced on the tiny test model by
pack_limit=0, so that the packed path is tested in seconds; benchmarks/page_large.py runs it at
shakespeare_char's 10.65M."""

import re

import pytest
import test_page_browser as base
import torch

from tinygpt.explain.ablate import ablated
from tinygpt.explain.page import half_rounded, page_data, write_page
from tinygpt.explain.trace import trace_prompt
from tinygpt.files.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow  # headless Chromium

browser, open_page = base.browser, base.open_page  # the same Chromium fixtures as test_page_browser's

PROMPT = 'FOOL:\n<b>Tom & "'
LAYER, HEAD = 1, 0
EXACT = 1e-4  # the page's logits against PyTorch's on the same (float16-rounded) weights, as for float32
SHOWN = "document.getElementById('running').hidden && tinygpt.state.trace"  # the worker's trace is drawn


@pytest.fixture(scope="module")
def packed_page(odd_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("packed_page") / "page.html"
    write_page(odd_checkpoint, PROMPT, out, LAYER, HEAD, pack_limit=0)
    return out


def logits_of(model, ids: list[int], off=()) -> torch.Tensor:
    with ablated(model, list(off)), torch.no_grad():
        return model(torch.tensor([ids]))[0].double()  # (T, vocab)


def test_the_page_packs_the_weights_in_float16_and_says_how_far_that_moves_the_logits(odd_checkpoint):
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    packed = page_data(odd_checkpoint, PROMPT, pack_limit=0)
    plain = page_data(odd_checkpoint, PROMPT)
    assert plain["worker"] is False and plain["precision"] == {"dtype": "float32", "max_logit_change": 0.0}
    assert packed["worker"] is True and packed["precision"]["dtype"] == "float16"
    for name, tensor in packed["weights"].items():  # half the bytes of float32's
        assert (
            tensor["dtype"] == "float16" and len(tensor["b64"]) <= len(plain["weights"][name]["b64"]) / 2 + 4
        )
    ids = tokenizer.encode(PROMPT)
    change = (logits_of(half_rounded(model), ids) - logits_of(model, ids)).abs().max().item()
    assert packed["weights"].keys() == dict(model.named_parameters()).keys()
    assert packed["precision"]["max_logit_change"] == pytest.approx(change, rel=1e-6)
    assert 0 < change < 0.05  # rounding moved something, and not far


def test_the_worker_s_logits_equal_python_s_on_the_weights_it_carries(odd_checkpoint, packed_page, open_page):
    page = open_page(packed_page)
    page.wait_for_function(SHOWN, timeout=60_000)
    assert page.evaluate("tinygpt.runsIn()") == "worker"
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    rounded = half_rounded(model)
    stated = page_data(odd_checkpoint, PROMPT, pack_limit=0)["precision"]["max_logit_change"]
    for text in (PROMPT, "KING:\nTh", "😀 café\t'yes'"):
        ids = tokenizer.encode(text)
        js = torch.tensor(page.evaluate("ids => tinygpt.logits(ids)", ids), dtype=torch.float64)
        assert (js - logits_of(rounded, ids)).abs().max().item() < EXACT, text
        if text == PROMPT:  # within what the page states, of the float32 model's
            assert (js - logits_of(model, ids)).abs().max().item() <= stated + EXACT
    assert "float16" in page.text_content("#precision") and "Web Worker" in page.text_content("#precision")
    said = re.search(r"logits by at most ([0-9.e+-]+) from", page.text_content("#precision")).group(1)
    assert float(said) == pytest.approx(stated, rel=0.05)  # the bound the page states: 2 digits


def test_switching_a_head_off_in_the_worker_does_what_python_s_ablation_does(
    odd_checkpoint, packed_page, open_page
):
    page = open_page(packed_page)
    page.wait_for_function(SHOWN, timeout=60_000)
    rounded = half_rounded(load_checkpoint(odd_checkpoint)[0])
    ids = load_checkpoint(odd_checkpoint)[1].encode(PROMPT)
    for off in ([(0, 1)], [(1, 0), (0, 0)]):
        names = [f"{layer}.{head}" for layer, head in off]
        js = torch.tensor(page.evaluate("([ids, off]) => tinygpt.logits(ids, off)", [ids, names]))
        assert (js - logits_of(rounded, ids, off)).abs().max().item() < EXACT, names
        assert (js - logits_of(rounded, ids)).abs().max().item() > 1e-3, f"{names} off: no change"
    # a click on a label: the page shows the worker's trace of the model without the head
    page.click('#grid button.role[data-layer="0"][data-head="0"]')
    page.wait_for_function(f"{SHOWN} && tinygpt.state.trace.off.has('0.0')", timeout=60_000)
    with ablated(rounded, [(0, 0)]):
        expected = trace_prompt(rounded, ids).layers[LAYER].weights[HEAD, len(ids) - 1].tolist()
    assert base.shown_weights(page) == pytest.approx(expected, abs=6e-5)


def test_typing_fast_shows_the_last_prompt(odd_checkpoint, packed_page, open_page):
    page = open_page(packed_page)
    page.wait_for_function(SHOWN, timeout=60_000)
    for n in range(1, 13):  # each keystroke a prompt; the worker runs the latest waiting one
        page.evaluate("text => { tinygpt.setPrompt(text); }", "QUEEN:\nthe 😀"[:n])
    page.wait_for_function(f"{SHOWN} && tinygpt.state.trace.T === 12", timeout=60_000)
    assert page.locator("#tokens .tok").count() == 12
    rounded, tokenizer, _ = load_checkpoint(odd_checkpoint)
    rounded = half_rounded(rounded)
    expected = trace_prompt(rounded, tokenizer.encode("QUEEN:\nthe 😀")).layers[LAYER].weights[HEAD, 11]
    assert base.shown_weights(page) == pytest.approx(expected.tolist(), abs=6e-5)


def test_without_a_web_worker_the_page_s_thread_runs_the_model(odd_checkpoint, packed_page, browser):
    page, messages = browser.new_page(), []
    page.on("console", lambda m: messages.append((m.type, m.text)))
    page.on("pageerror", lambda e: messages.append(("error", str(e))))
    page.add_init_script("delete window.Worker;")  # as a browser without workers
    try:
        page.goto(packed_page.as_uri())
        page.wait_for_function(SHOWN, timeout=60_000)
        assert page.evaluate("tinygpt.runsIn()") == "page"
        model, tokenizer, _ = load_checkpoint(odd_checkpoint)
        ids = tokenizer.encode(PROMPT)
        js = torch.tensor(page.evaluate("ids => tinygpt.logits(ids)", ids), dtype=torch.float64)
        assert (js - logits_of(half_rounded(model), ids)).abs().max().item() < EXACT
        assert "on the page's own thread" in page.text_content("#precision")
    finally:
        page.close()
    assert [text for kind, text in messages if kind == "error"] == []
    assert any(kind == "warning" and "no Web Worker" in text for kind, text in messages)
