"""The page's views inside a notebook cell: the same page, its same script, one section of it shown.

A notebook puts every cell's output into one document, so the page cannot be pasted into
it as it is: its element ids would collide between cells and its script would see the
other cells' elements. Each view is therefore the whole page (page.render_page: its
style, script and data inlined, nothing fetched) in an <iframe srcdoc>, a document of
its own, with every section but one hidden. Inside the frame, assets/cell.js tells the
cell the height the view needs; the few lines of `FRAME` outside it ask for it and listen.
The frame is sandboxed to scripts alone: the page cannot reach the notebook around it.

    cell_html(data, "grid")   the heatmaps with their role labels
    "lens"                    the prompt's tokens, their top-5 and the logit lens rows
    "walkthrough"             the arithmetic of one row; "backward" with its backward pass open
    "circuits", "timeline"    the circuit view, the timeline with its slider
    "attribution"             the selected position's direct logit attribution
    "neurons", "features"     the costliest MLP neurons; the run's feature dictionaries
"""

import html
import uuid
from importlib import resources
from typing import Any

from tinygpt.explain.page import render_page

SECTIONS = {
    "page": None,  # every section
    "grid": "grid-section",
    "lens": "prompt-section",
    "walkthrough": "arith-section",
    "backward": "arith-section",
    "circuits": "circuits-section",
    "timeline": "timeline-section",
    "attribution": "attribution-section",
    "neurons": "neurons-section",
    "features": "features-section",
}
HEIGHT = 480  # pixels a frame has before its page says how much it needs
CELL_LIVE_LIMIT = 500_000  # parameters up to which a view carries the weights (about 2.7 MB of base64)

FRAME = """<iframe id="$id" class="tinygpt-view" title="tinygpt: $view" sandbox="allow-scripts"
 style="width:100%;height:${height}px;border:0" srcdoc="$page"></iframe>
<script>
(function () {
  const frame = document.getElementById("$id");
  window.addEventListener("message", (e) => {
    if (frame && e.source === frame.contentWindow && e.data && e.data.tinygptHeight)
      frame.style.height = e.data.tinygptHeight + "px";
  });
  // ask too: once it has loaded (Chromium draws no frame out of sight, so it may not say so itself),
  // and now, in case it loaded before this ran
  const ask = () => frame.contentWindow.postMessage("tinygpt-height?", "*");
  frame.addEventListener("load", ask);
  ask();
})();
</script>"""


OWN_DATA = {  # data that only its own section draws
    "timeline": "timeline",
    "circuits": "circuits",
    "neurons": "neurons",
    "features": "features",
}


def framed_page(data: dict[str, Any], view: str) -> str:
    """The page, showing only the section of `view`, with assets/cell.js after its script. The data that
    only a hidden section draws is left out (null, as for a run without it; its script then draws
    nothing), so that a saved notebook holds each view's own data: the tutorial's timeline, 160 kB, once."""
    section = SECTIONS[view]
    if section is not None:
        data = {
            key: None if key in OWN_DATA and OWN_DATA[key] != view else value for key, value in data.items()
        }
    hide = "" if section is None else f"header, main > section:not(#{section}) {{ display: none; }}"
    cell_script = (resources.files("tinygpt.explain") / "assets" / "cell.js").read_text(encoding="utf-8")
    page = render_page(data)
    page = page.replace("</head>", f"<style>{hide} body {{ margin: 0 8px; }}</style>\n</head>", 1)
    if view == "backward":
        page = page.replace("<body>", '<body data-backward="open">', 1)
    return page.replace("</body>", f'<script>\n"use strict";\n{cell_script}</script>\n</body>', 1)


def cell_html(data: dict[str, Any], view: str) -> str:
    """HTML for a notebook cell: the framed page, and the listener that sizes its frame. Each call
    gets a new id, so that any number of views live in one notebook."""
    if view not in SECTIONS:
        raise ValueError(f"no view {view!r}: one of {', '.join(SECTIONS)}")
    frame_id = f"tinygpt-{uuid.uuid4().hex[:12]}"
    page = html.escape(framed_page(data, view), quote=True)
    text = FRAME.replace("$id", frame_id).replace("$view", view).replace("${height}", str(HEIGHT))
    return text.replace("$page", page)
