"""Regenerate the pictures in docs/ and the figures the guides quote, together, from one trained run.

    python scripts/make_pictures.py                        # checkpoints/cpu: the README's first run
    python scripts/make_pictures.py checkpoints/tiny --layer 1 --head 1 --out /tmp/pictures

Writes into --out (docs/ by default):
  explainer.png   the explainer page of the run's best.pt for PROMPT, in a 1280 × 1700 window
  heads_page.png  the page's grid of heatmaps for HEADS_PROMPT, each map labelled with its head's role
  timeline.png    the page's timeline, its slider at the second snapshot (the first evaluation)
  figures.json    the figures the guides quote: the run's record, the page's and the timeline's
                  size, each snapshot's sample (its first line), and what each command printed
                  (the loss on the whole validation split, the head roles, the timeline, ...)
  figures.md      the same for reading, each command with its output

Pictures are taken in the system's headless Chromium (apt-get install chromium; never a downloaded
browser) through playwright (pip install -e '.[test]'). docs/tensorboard.png is TensorBoard's own
page and is not made here.
"""

import argparse
import contextlib
import io
import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works from a plain checkout too

from tinygpt import load_checkpoint
from tinygpt.app.cli import main as tinygpt
from tinygpt.errors import UserError
from tinygpt.explain.page import write_page
from tinygpt.files.atomic import write_atomic
from tinygpt.files.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "To be, or not to be"  # the explainer page's, as in docs/inside.md
HEADS_PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"  # heads_page.png's
SHORT = "To be, or not"  # the prompt of the terminal views the guides show
WINDOW = {"width": 1280, "height": 1700}
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def commands(run: Path, layer: int, head: int) -> dict[str, list[str]]:
    """The commands whose output the guides show, by name: tinygpt's arguments."""
    best, lh = str(run / "best.pt"), ["--layer", str(layer), "--head", str(head)]
    return {
        "evaluate": ["evaluate", best, "--quiet"],  # the loss on the whole validation split
        "heads": ["inspect", best, "--heads"],
        "timeline": ["inspect", str(run), "--timeline"],
        "attention": ["inspect", best, "--prompt", SHORT, *lh],
        "walkthrough": ["explain", best, "--prompt", SHORT, *lh, "--token", "11", "--dims", "4"],
        "sample": [
            "sample",
            "--checkpoint",
            best,
            "--prompt",
            "ROMEO:",
            "--seed",
            "1",
            "--temperature",
            "0.8",
        ]
        + ["--max-new-tokens", "400"],
    }


def printed(argv: list[str]) -> str:
    """What `tinygpt ARGV` prints; a command that fails is the user's error, with what it said."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = tinygpt(argv)
    if code != 0:
        raise UserError(f"tinygpt {' '.join(argv)} failed: {err.getvalue().strip()}")
    return out.getvalue()


def screenshots(pages: list[tuple[Path, str | None, str | None]]) -> list[bytes]:
    """PNGs of pages in a WINDOW-wide headless Chromium: (page file, element or None for the window,
    the timeline slider's value or None) each."""
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if chromium is None:
        raise UserError(
            "no Chromium found to take the screenshots with; install it: apt-get install chromium"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise UserError("taking the screenshots needs playwright: pip install -e '.[test]'") from None
    pngs, errors = [], []
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=CHROMIUM_FLAGS, viewport=WINDOW
        )
        for page_file, element, slider in pages:
            page = browser.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_file.as_uri())
            page.wait_for_load_state("networkidle")
            if slider is not None:
                page.locator("#tl-slider").fill(slider)
            pngs.append(page.locator(element).screenshot() if element else page.screenshot())
            page.close()
        browser.close()
    if errors:
        raise UserError(f"the page raised an error in Chromium, so no picture was taken: {errors[0]}")
    return pngs


def figures_md(figures: dict) -> str:
    """figures.json for reading: the numbers, each snapshot's sample, then each command with its output."""
    lines = [
        "# Figures of one trained run",
        "",
        "Written by `python scripts/make_pictures.py` with the pictures.",
        "",
    ]
    lines += [f"- {name}: {value}" for name, value in figures.items() if name not in ("samples", "printed")]
    lines += ["", "## samples", "", "```text"]
    lines += [f"step {step:>4}: {line}" for step, line in figures["samples"].items()] + ["```"]
    for name, (argv, text) in figures["printed"].items():
        lines += ["", f"## {name}", "", "```text", f"$ tinygpt {shlex.join(argv)}", text.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


def make(run: Path, out: Path, layer: int, head: int) -> dict:
    """Write the pictures and figures of run into out; returns the figures."""
    _, _, record = load_checkpoint(run / "best.pt", device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        page, heads_page = Path(tmp) / "explain.html", Path(tmp) / "heads.html"
        write_page(run / "best.pt", PROMPT, page, layer, head)
        write_page(run / "best.pt", HEADS_PROMPT, heads_page, 0, 1)  # head 0.1 picked, as docs/heads.md says
        shots = [(page, None, None), (heads_page, "#grid-section", None), (page, "#timeline-section", "1")]
        explainer, grid, timeline = screenshots(shots)
        page_mb = round(page.stat().st_size / 1e6, 1)
    figures = {
        "run": str(run),
        "step": record["step"],
        "best_step": record["best_step"],
        "best_val_loss": round(record["best_val_loss"], 4),
        "parameters": record["num_params"],
        "page_mb": page_mb,
        "timeline_kb": round((run / "timeline.jsonl").stat().st_size / 1e3),
        "samples": {s["step"]: s["sample"].split("\n")[0] for s in read_metrics(run / "timeline.jsonl")},
        "printed": {name: (argv, printed(argv)) for name, argv in commands(run, layer, head).items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, png in (("explainer.png", explainer), ("heads_page.png", grid), ("timeline.png", timeline)):
        write_atomic(out / name, png)
    write_atomic(out / "figures.json", json.dumps(figures, indent=1, ensure_ascii=False) + "\n")
    write_atomic(out / "figures.md", figures_md(figures))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", default="checkpoints/cpu", help="a run directory (checkpoints/cpu)")
    parser.add_argument("--layer", type=int, default=2, help="the head shown in detail: its layer (2)")
    parser.add_argument("--head", type=int, default=0, help="and its number in the layer (0)")
    parser.add_argument("--out", default=str(ROOT / "docs"), help="where to write them (docs/)")
    args = parser.parse_args(argv)
    try:
        figures = make(Path(args.run), Path(args.out), args.layer, args.head)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    loss = figures["best_val_loss"]
    print(f"wrote the pictures and figures of {args.run} (best val loss {loss}) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
