"""The explainer page in a real browser: headless Chromium (the system's, never a downloaded one)."""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest
import torch
from conftest import make_corpus, tiny_raw, train

from tinygpt import GPT, GPTConfig
from tinygpt.config.run_config import from_dict
from tinygpt.explain.attribution import logit_parts
from tinygpt.explain.page import write_page
from tinygpt.explain.trace import trace_prompt
from tinygpt.files.checkpoint import FORMAT_VERSION, load_checkpoint, write_payload
from tinygpt.tokenizer import CharTokenizer

pytestmark = pytest.mark.slow  # headless Chromium

NEEDS = "apt-get install chromium, and the playwright Python package (pip install -e '.[test]')"
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PROMPT = 'FOOL:\n<b>Tom & "'  # 15 characters of the 16 the model reads
LAYER, HEAD = 1, 0


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium: .ci/run installs Debian's chromium package")
        pytest.skip(f"no Chromium on this machine to drive the page in: {NEEDS}")
    playwright = pytest.importorskip("playwright.sync_api", reason=f"no playwright: {NEEDS}")

    with playwright.sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 1400},
        )
        yield context
        context.close()


@pytest.fixture
def open_page(browser):
    """Open a page file; afterwards, fail on anything it logged as an error."""
    pages, errors = [], []

    def load(path: Path):
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        pages.append(page)
        return page

    yield load
    for page in pages:
        page.close()
    assert errors == [], "the page logged errors"


def shown_weights(page) -> list[float]:
    return [float(x) for x in page.locator("#arith td.w").all_text_contents()]


def model_vocab(checkpoint: Path) -> list[str]:
    return load_checkpoint(checkpoint)[1].chars


def python_weights(checkpoint: Path, prompt: str, token: int) -> list[float]:
    model, tokenizer, _ = load_checkpoint(checkpoint)
    return trace_prompt(model, tokenizer.encode(prompt)).layers[LAYER].weights[HEAD, token].tolist()


def test_live_page_logits_match_pytorch(odd_checkpoint, tmp_path, open_page):
    out = tmp_path / "live.html"
    write_page(odd_checkpoint, PROMPT, out, LAYER, HEAD)
    page = open_page(out)
    model, tokenizer, _ = load_checkpoint(odd_checkpoint)
    for text in (PROMPT, "KING:\nTh", "😀 café\t'yes'"):
        ids = tokenizer.encode(text)
        js = torch.tensor(page.evaluate("ids => tinygpt.logits(ids)", ids), dtype=torch.float64)
        logits, _ = model(torch.tensor([ids]))
        assert (js - logits[0].double()).abs().max().item() < 1e-4, text


BARE_CHARS = list("\n ab<😀")
BARE_IDS = [2, 3, 1, 4, 5, 0, 2]


def bare_page(tmp_path: Path, open_page, name: str, **options):
    """The page of an untrained 2-layer model (GPTConfig options), saved alone: (page, model)."""
    torch.manual_seed(0)
    sizes = dict(vocab_size=len(BARE_CHARS), block_size=8, n_layer=2, n_head=2, n_embd=8)
    model = GPT(GPTConfig(**sizes, **options)).eval()
    payload = {"format_version": FORMAT_VERSION, "model_config": vars(model.config), "tokenizer": BARE_CHARS}
    write_payload({**payload, "model": model.state_dict()}, tmp_path / f"{name}.pt")
    write_page(tmp_path / f"{name}.pt", "ab <😀\n", tmp_path / f"{name}.html")
    page = open_page(tmp_path / f"{name}.html")
    js = torch.tensor(page.evaluate("ids => tinygpt.logits(ids)", BARE_IDS), dtype=torch.float64)
    logits, _ = model(torch.tensor([BARE_IDS]))
    assert (js - logits[0].double()).abs().max().item() < 1e-4  # the page runs the model
    return page, model


def test_page_runs_a_model_without_biases(tmp_path, open_page):
    page, _ = bare_page(tmp_path, open_page, "bare", bias=False)
    assert "no metrics.jsonl beside bare.pt" in page.text_content("#curves-note")


def test_page_runs_an_attention_only_model_and_splits_its_logits(tmp_path, open_page):
    """model.mlp: false: the page's forward and attribution skip the MLPs, as the model does; no neurons."""
    page, model = bare_page(tmp_path, open_page, "attn_only", mlp=False)
    parts = page.evaluate("([ids, t]) => tinygpt.attribution(ids, t, [], 'zero')", [BARE_IDS, 5])
    found = logit_parts(model, CharTokenizer(BARE_CHARS), BARE_IDS, 5, None, None)
    assert parts["parts"].keys() == found.parts.keys() and not any(n.startswith("mlp") for n in found.parts)
    for name, value in parts["parts"].items():
        assert value == pytest.approx(found.parts[name], abs=1e-4), name
    assert "attention-only" in page.text_content("#neurons-note")


def test_clicking_a_token_shows_its_weights(odd_checkpoint, tmp_path, open_page):
    out = tmp_path / "live.html"
    write_page(odd_checkpoint, PROMPT, out, LAYER, HEAD)
    page = open_page(out)
    assert page.locator("#tokens .tok").all_text_contents() == list('FOOL:↵<b>Tom·&·"')
    page.click('#tokens .tok[data-pos="8"]')
    assert 'Position 8, ">", through layer 1, head 0.' in page.text_content("#arith .lead")
    assert shown_weights(page) == pytest.approx(python_weights(odd_checkpoint, PROMPT, 8), abs=6e-5)
    # hovering a heatmap cell shows its weight
    canvas = page.locator(f'#grid canvas[data-layer="{LAYER}"][data-head="{HEAD}"]')
    canvas.hover(position=cell_centre(canvas, 8, 2))
    tip = page.text_content("#tooltip")
    assert 'query 8 ">" → key 2 "O"' in tip
    weight = python_weights(odd_checkpoint, PROMPT, 8)[2]
    assert tip.endswith(f"weight {weight:.4f}")
    # clicking a row of another head selects it
    other = page.locator('#grid canvas[data-layer="0"][data-head="1"]')
    other.click(position=cell_centre(other, 3, 0))
    assert 'Position 3, "L", through layer 0, head 1.' in page.text_content("#arith .lead")
    shot = page.screenshot(full_page=True)
    width, height, pixels = png_pixels(shot)
    assert width == page.viewport_size["width"] and height >= page.viewport_size["height"]
    assert len(set(pixels)) > 16  # drawn: heatmaps, text and curves, not a blank page


def cell_centre(canvas, i: int, j: int) -> dict[str, float]:
    """Where on a heatmap's canvas (in CSS pixels) the cell of query i and key j is, past the axis labels."""
    cell, margin = (float(canvas.get_attribute(name)) for name in ("data-cell", "data-margin"))
    scale = canvas.bounding_box()["width"] / float(canvas.get_attribute("width"))
    return {"x": (margin + (j + 0.5) * cell) * scale, "y": (margin + (i + 0.5) * cell) * scale}


def png_pixels(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and decompressed scanlines of a PNG: enough to tell a drawn page from a blank one."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at : at + 8])
        chunks.setdefault(kind, []).append(png[at + 8 : at + 8 + length])
        at += 12 + length
    width, height = struct.unpack(">II", chunks[b"IHDR"][0][:8])
    return width, height, zlib.decompress(b"".join(chunks[b"IDAT"]))


def test_typing_a_prompt_updates_everything(odd_checkpoint, tmp_path, open_page):
    out = tmp_path / "live.html"
    write_page(odd_checkpoint, PROMPT, out, LAYER, HEAD)
    page = open_page(out)
    page.fill("#prompt-input", "QUEEN:\nthe 😀")
    assert page.locator("#tokens .tok").count() == 12
    assert "Position 11" in page.text_content("#arith .lead"), "the last character stays selected"
    assert shown_weights(page) == pytest.approx(
        python_weights(odd_checkpoint, "QUEEN:\nthe 😀", 11), abs=6e-5
    )
    page.fill("#prompt-input", "the €\u2028\u2029")
    note = page.text_content("#prompt-note")
    assert 'Not in the model\'s vocabulary: "€" U+2028 U+2029' in note  # not two "�"
    assert page.locator("#tokens .tok").count() == 12, "an unreadable prompt leaves the last one shown"


def test_a_run_name_that_turns_text_around_turns_nothing_else(odd_checkpoint, tmp_path, open_page):
    """U+202E (right-to-left override) in the run's directory name: the header's line reads left to right."""
    run = tmp_path / "abc\u202edef"
    run.mkdir()
    shutil.copy(odd_checkpoint, run / "best.pt")
    write_page(run / "best.pt", PROMPT, tmp_path / "p.html", LAYER, HEAD)
    page = open_page(tmp_path / "p.html")
    assert page.text_content("#about bdi") == "abc\u202edef/best.pt"  # the name, kept to itself:
    assert page.evaluate("getComputedStyle(document.querySelector('#about bdi')).unicodeBidi") == "isolate"
    assert page.text_content("#about").startswith("abc\u202edef/best.pt · ")  # the rest outside it


def test_large_model_page_shows_the_python_trace(odd_checkpoint, tmp_path, open_page):
    out = tmp_path / "static.html"
    write_page(odd_checkpoint, PROMPT, out, LAYER, HEAD, token=5, live_limit=1000)
    page = open_page(out)
    assert page.is_hidden("#prompt-input")
    assert "more than the 1,000 this page runs itself" in page.text_content("#prompt-note")
    assert "Position 5" in page.text_content("#arith .lead")
    page.click('#tokens .tok[data-pos="12"]')
    expected = python_weights(odd_checkpoint, PROMPT, 12)
    assert page.locator("#arith td.w").all_text_contents() == [f"{w:.4f}" for w in expected]
    assert page.evaluate("tinygpt.logits") is None, "no weights, no forward pass"
    assert page.is_visible("#curves") and page.locator("#pca text.char").count() == len(
        model_vocab(odd_checkpoint)
    )


def test_make_pictures_makes_the_pictures_and_the_figures_of_a_real_run(tmp_path):
    """scripts/make_pictures.py, which makes docs/*.png and docs/figures.*: on a tiny run of 30 steps.

    Run as its own process, as a user runs it: this module's browser keeps Playwright's
    event loop running in the test's thread, where a second Playwright cannot start.
    """
    if CHROMIUM is None:
        pytest.skip(f"no Chromium on this machine to take the pictures with: {NEEDS}")
    pytest.importorskip("playwright.sync_api", reason=f"no playwright: {NEEDS}")
    root = Path(__file__).resolve().parents[2]
    corpus = tmp_path / "corpus.txt"  # holding every character of the script's prompts
    prompts = "ROMEO:\nBut soft, what light through yonder window breaks?\nTo be, or not to be\n"
    corpus.write_text(make_corpus(300) + prompts * 20, encoding="utf-8")
    run, out = tmp_path / "run", tmp_path / "docs"
    train(from_dict(tiny_raw(corpus, run, max_iters=30, eval_interval=10)), progress=False)

    def script(name: str, *args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, str(root / "scripts" / name), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=600)

    made = script("make_pictures.py", str(run), "--layer", "1", "--head", "1", "--out", str(out))
    assert made.returncode == 0, made.stderr
    for name, size in (("explainer.png", (1280, 1700)), ("heads_page.png", None), ("timeline.png", None)):
        width, height, pixels = png_pixels((out / name).read_bytes())
        assert size in (None, (width, height)) and width <= 1280
        assert len(set(pixels)) > 16, name  # drawn: heatmaps, text and curves, not a blank page
    figures = json.loads((out / "figures.json").read_text(encoding="utf-8"))
    record = load_checkpoint(run / "best.pt")[2]
    assert (figures["step"], figures["best_step"]) == (30, record["best_step"])
    assert figures["parameters"] == record["num_params"]
    assert figures["best_val_loss"] == round(record["best_val_loss"], 4)
    assert figures["page_mb"] > 0
    heads = script("inspect_checkpoint.py", str(run / "best.pt"), "--heads")
    assert figures["printed"]["heads"][1] == heads.stdout  # the table as the command prints it
    assert figures["printed"]["timeline"][1].count("\n") > 4  # a row per snapshot, at steps 0, 10, 20, 30
    text = (out / "figures.md").read_text(encoding="utf-8")
    assert all(printed.rstrip("\n") in text for _, printed in figures["printed"].values())
    missing = script("make_pictures.py", str(tmp_path / "none"), "--out", str(out))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_circuit_figures_fills_every_block_of_the_guide_and_the_readme_from_real_runs(tmp_path):
    """scripts/circuit_figures.py, which writes docs/circuits.md's blocks, the README's, the timeline
    picture and the circuit view: on a tiny 2-layer run of 20 steps (as the induction run and as two
    runs of cpu.yaml), in its own process as make_pictures.py above."""
    if CHROMIUM is None:
        pytest.skip(f"no Chromium on this machine to take the picture with: {NEEDS}")
    pytest.importorskip("playwright.sync_api", reason=f"no playwright: {NEEDS}")
    root = Path(__file__).resolve().parents[2]
    corpus = tmp_path / "corpus.txt"  # every character of the script's prompt: letters and a space
    corpus.write_text(make_corpus(300) + "mqdtlbksae mqdtlbksae\n" * 20, encoding="utf-8")
    run = tmp_path / "run"
    train(from_dict(tiny_raw(corpus, run, max_iters=20, eval_interval=10)), progress=False)
    blocks = {"doc": ("induction", "cpu", "seeds", "seeds_adamw"), "readme": ("timing", "default")}
    paths = {}
    for name, names in blocks.items():
        paths[name] = tmp_path / f"{name}.md"
        empty = [f"<!-- figures: {block} -->\nUNFILLED\n<!-- /figures -->\n" for block in names]
        paths[name].write_text("".join(empty))
    svg, png = tmp_path / "timeline.svg", tmp_path / "circuits.png"
    argv = ["--run", str(run), "--cpu-run", str(run), str(run), "--doc", str(paths["doc"])]
    argv += ["--readme", str(paths["readme"]), "--svg", str(svg), "--png", str(png)]
    made = subprocess.run(
        [sys.executable, str(root / "scripts" / "circuit_figures.py"), *argv],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr
    doc, readme = paths["doc"].read_text(encoding="utf-8"), paths["readme"].read_text(encoding="utf-8")
    assert "UNFILLED" not in doc + readme  # every block filled
    assert f"Run: `{run}`, 20 steps, seed" in doc and "| 20 | " in doc  # the timeline, a row a snapshot
    assert doc.count(f"| `{run}` | 16 × 8 | 20 | float32 |") == 2  # one row for each cpu run
    assert "K-comp" in doc and "looks" in doc  # inspect --circuits, then the heads in words
    figures = json.loads((root / "docs" / "circuits_figures.json").read_text(encoding="utf-8"))
    assert f"Seeds run on: {figures['cpu']['model']}" in doc and "--set train.optimizer=adamw" in doc
    assert "block 16" in readme and "the threshold is 0.4" in readme
    assert svg.read_text(encoding="utf-8").count("<polyline") == 4  # two losses, two scores
    width, _, pixels = png_pixels(png.read_bytes())
    assert width <= 1280 and len(set(pixels)) > 16  # the circuit view drawn: nodes, edges, text
