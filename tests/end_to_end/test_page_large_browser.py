"""The page of a model at shakespeare_char's real size (6 × 384, block 256, 10.65M parameters) in headless
Chromium, as `tinygpt explain --html` writes it: within the 30 MB budget, its float16 weights run in a Web
Worker, its logits (with and without a head) equal Python's on those weights, and no console errors.
test_page_worker_browser.py tests the same path on the tiny model in more ways; benchmarks/page_large.py
times this one."""

import pytest
import test_page_browser as base
import torch
from conftest import load_benchmark

from tinygpt.explain.ablate import ablated
from tinygpt.explain.page import PAGE_BUDGET, half_rounded, precision_data, write_page
from tinygpt.files.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow  # headless Chromium and a 30 MB page

browser, open_page = base.browser, base.open_page  # the same Chromium fixtures as test_page_browser's

PROMPT = "ROMEO:\nBut soft, what"  # short: the page's backward panel costs most per position
EXACT = 1e-4  # the page's logits against PyTorch's on the same float16-rounded weights
SHOWN = "document.getElementById('running').hidden && tinygpt.state.trace"


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """shakespeare_char's model, untrained (benchmarks/page_large.py's checkpoint), and its page."""
    directory = tmp_path_factory.mktemp("large_page")
    checkpoint = load_benchmark("page_large").checkpoint(directory)
    out = directory / "page.html"
    write_page(checkpoint, PROMPT, out)
    return checkpoint, out


def logits_of(model, ids: list[int], off=()) -> torch.Tensor:
    with ablated(model, list(off)), torch.no_grad():
        return model(torch.tensor([ids]))[0].double()  # (T, vocab)


def test_the_shakespeare_char_page_runs_its_model_in_a_worker_as_python_does(large, browser, open_page):
    checkpoint, out = large
    model, tokenizer, _ = load_checkpoint(checkpoint)
    assert 10e6 < model.num_params() < 11e6
    assert out.stat().st_size <= PAGE_BUDGET <= 30e6
    browser.set_default_navigation_timeout(300_000)  # 30 MB to read, on a machine that may be busy
    page = open_page(out)  # fails the test on any console error
    page.wait_for_function(SHOWN, timeout=300_000)
    assert page.evaluate("tinygpt.runsIn()") == "worker"
    rounded = half_rounded(model)
    ids = tokenizer.encode(PROMPT)
    stated = precision_data(model, ids, packed=True)["max_logit_change"]  # what the page says
    js = torch.tensor(page.evaluate("ids => tinygpt.logits(ids)", ids), dtype=torch.float64)
    assert (js - logits_of(rounded, ids)).abs().max().item() < EXACT
    assert (js - logits_of(model, ids)).abs().max().item() <= stated + EXACT
    js_off = torch.tensor(page.evaluate("([ids, off]) => tinygpt.logits(ids, off)", [ids, ["2.3"]]))
    assert (js_off.double() - logits_of(rounded, ids, [(2, 3)])).abs().max().item() < EXACT
    assert (js_off.double() - js).abs().max().item() > 1e-4, "head 2.3 off changed nothing"
