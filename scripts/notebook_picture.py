"""docs/notebook.png: one cell of the tutorial notebook, run in a real kernel, as Jupyter's own HTML
export draws it, photographed in headless Chromium.

    python scripts/notebook_picture.py                     # runs docs/tutorial.ipynb afresh (cpu_quick)
    python scripts/notebook_picture.py --executed run.ipynb --out /tmp/notebook.png

Runs docs/tutorial.ipynb top to bottom in a fresh kernel in a temporary directory (its own
cpu_quick run: a couple of minutes on a CPU), unless --executed names a notebook already run;
writes it as HTML with nbconvert's exporter (JupyterLab's look; pip install nbconvert) and
photographs the cell that shows `CELL`, its code and the view it drew (its first HEIGHT pixels),
once the view has sized its frame. Needs nbclient and ipykernel (pip install -e '.[test]'), and
the system's Chromium (apt-get install chromium) driven by playwright, as make_pictures.py does.
"""

import argparse
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.ipynb"
CELL = "lm.attention(PROMPT)"  # the cell photographed: the heatmaps, each head labelled with its role
WIDTH = 1100  # pixels of the window the notebook is drawn in
HEIGHT = 1000  # at most this many pixels of the cell, from its top


def executed(where: Path):
    """The tutorial, run top to bottom in a fresh kernel whose working directory is `where`."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(TUTORIAL, as_version=4)
    where_to_run = {"metadata": {"path": str(where)}}  # the kernel's working directory
    NotebookClient(notebook, timeout=1800, kernel_name="python3", resources=where_to_run).execute()
    return notebook


def photograph(html_file: Path, out: Path) -> None:
    """The cell holding CELL, as Chromium draws the exported notebook."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT}, device_scale_factor=1)
        page.goto(html_file.as_uri())
        cell = page.locator(".jp-Cell", has_text=CELL).last
        cell.evaluate(
            "cell => cell.scrollIntoView()"
        )  # at the window's top: Chromium draws no frame out of sight
        view = cell.locator("iframe").element_handle()
        view.content_frame().wait_for_function("() => window.tinygpt && window.tinygpt.state.trace")
        page.wait_for_function("frame => frame.style.height !== '480px'", arg=view)
        page.wait_for_timeout(500)  # a frame's paint after its last resize
        box = cell.bounding_box()  # in the window, whose top the cell is at
        box["height"] = min(box["height"], HEIGHT - box["y"])  # a tall cell's top: its code, the first maps
        page.screenshot(path=str(out), clip=box)  # the window as drawn, the view's frame in it
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executed", type=Path, help="a run tutorial notebook (default: run it now)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "notebook.png")
    args = parser.parse_args()
    import nbformat
    from nbconvert import HTMLExporter

    with tempfile.TemporaryDirectory() as tmp:
        notebook = nbformat.read(args.executed, as_version=4) if args.executed else executed(Path(tmp))
        body, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook)
        html_file = Path(tmp) / "tutorial.html"
        html_file.write_text(body, encoding="utf-8")
        photograph(html_file, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
