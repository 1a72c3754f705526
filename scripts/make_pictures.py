"""Regenerate docs/explainer.png, the README's picture of the explainer page, from a trained run.

    python scripts/make_pictures.py                      # from checkpoints/cpu/best.pt
    python scripts/make_pictures.py --checkpoint checkpoints/tiny/best.pt --layer 0 --head 1

Writes the page that the README's `explain --html` command writes (the same prompt,
layer and head by default), opens it in headless Chromium through playwright, and
saves what a 1280 × 1700 window shows. Needs the system's Chromium (apt-get install
chromium; never a downloaded browser) and playwright (pip install -e '.[test]').
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works from a plain checkout too

from tinygpt.errors import UserError
from tinygpt.explain.page import write_page
from tinygpt.files import write_atomic

ROOT = Path(__file__).resolve().parents[1]
WINDOW = {"width": 1280, "height": 1700}
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def screenshot(page_file: Path) -> bytes:
    """The PNG that headless Chromium shows of a page file, in a WINDOW-sized window."""
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if chromium is None:
        raise UserError("no Chromium found to take the screenshot with; install it: apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise UserError("taking the screenshot needs playwright: pip install -e '.[test]'") from None
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=CHROMIUM_FLAGS, viewport=WINDOW
        )
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        page.wait_for_load_state("networkidle")
        png = page.screenshot()
        browser.close()
    if errors:
        raise UserError(f"the page raised an error in Chromium, so no picture was taken: {errors[0]}")
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="checkpoints/cpu/best.pt", help="default: the README's")
    parser.add_argument("--prompt", default="To be, or not to be", help="default: the README's")
    parser.add_argument("--layer", type=int, default=2, help="the head shown in detail: its layer (2)")
    parser.add_argument("--head", type=int, default=0, help="and its number in the layer (0)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "explainer.png"), help="docs/explainer.png")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            page_file = Path(tmp) / "explain.html"
            write_page(args.checkpoint, args.prompt, page_file, args.layer, args.head)
            png = screenshot(page_file)
        write_atomic(args.out, png)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: the explainer page of {args.checkpoint} for {args.prompt!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
