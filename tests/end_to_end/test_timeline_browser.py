"""The page's timeline in headless Chromium: the slider shows each step's own stored attention."""

import pytest
from test_page_browser import browser, open_page  # noqa: F401 (fixtures)

from tinygpt.explain.page import write_page
from tinygpt.explain.roles import ROLES
from tinygpt.files.snapshots import FILE_NAME, read_timeline

pytestmark = pytest.mark.slow  # headless Chromium

WHITE, BLUE = (247, 251, 255), (8, 48, 107)  # grid.js's shadeOf: weight 0 → white, 1 → deep blue


def shade(weight: float) -> list[int]:
    return [round(w + (b - w) * weight) for w, b in zip(WHITE, BLUE, strict=True)]


def drawn(page, layer: int, head: int, cells: list[tuple[int, int]]) -> list[list[int]]:
    """The colour at the centre of cells (i, j) of one head's timeline heatmap."""
    return page.evaluate(
        """([layer, head, cells]) => {
          const canvas = document.querySelector(
            `#tl-maps canvas[data-layer="${layer}"][data-head="${head}"]`);
          const ctx = canvas.getContext("2d"), cell = tinygptTimeline.cell, m = tinygptTimeline.margin;
          const at = (t) => m + t * cell + cell / 2;  // the centre of cell t, past the axis labels
          return cells.map(([i, j]) => Array.from(ctx.getImageData(at(j), at(i), 1, 1).data.slice(0, 3)));
        }""",
        [layer, head, cells],
    )


def test_moving_the_slider_shows_that_steps_stored_weights_and_role_labels(
    odd_checkpoint,
    tmp_path,
    open_page,  # noqa: F811 (the fixture)
):
    snapshots = read_timeline(odd_checkpoint.parent / FILE_NAME)
    assert [s["step"] for s in snapshots] == [0, 10, 20, 30]
    out = tmp_path / "timeline.html"
    write_page(odd_checkpoint, "KING:", out)
    page = open_page(out)  # and, when the test ends, no console errors
    assert page.is_visible("#timeline-section")
    assert page.locator("#tl-maps canvas").count() == 4  # a map per head
    assert page.locator("#tl-roles svg").count() == len(ROLES)  # a chart per role
    slider = page.locator("#tl-slider")
    P = len(snapshots[0]["probe"])
    cells = [(i, j) for i in range(P) for j in range(0, i + 1, 3)]
    seen = {}
    for key, index in (("Home", 0), ("ArrowRight", 1), ("End", 3)):
        slider.press(key)  # as a person moves it, from the keyboard
        s = snapshots[index]
        assert page.locator("#tl-step").text_content().startswith(f"step {s['step']} ")
        for layer in range(2):
            for head in range(2):
                canvas = page.locator(f'#tl-maps canvas[data-layer="{layer}"][data-head="{head}"]')
                assert canvas.get_attribute("data-step") == str(s["step"])
                stored = s["attention"][layer][head]
                colours = drawn(page, layer, head, cells)
                for (i, j), colour in zip(cells, colours, strict=True):
                    assert colour == pytest.approx(shade(stored[i][j]), abs=1), (s["step"], layer, head, i, j)
                seen[index, layer, head] = colours
        labels = page.locator("#tl-maps .tl-label").all_text_contents()
        assert [label.split()[:2] for label in labels] == [
            [f"{h['layer']}.{h['head']}", h["label"]] for h in s["heads"]
        ]
        assert page.text_content("#tl-sample") == s["sample"]
        first_column = page.locator("#tl-top5 .tl-col").first.locator(".tl-next").all_text_contents()
        assert first_column[0].endswith(f"{s['top5'][0][0][1]:.2f}")
    assert seen[0, 1, 1] != seen[3, 1, 1], "the heatmaps changed with the step"


@pytest.mark.parametrize("width", [800, 1400])
def test_the_role_charts_say_which_colour_is_which_head_and_the_maps_name_their_axes(
    odd_checkpoint,
    tmp_path,
    open_page,  # noqa: F811 (the fixture)
    width,
):
    out = tmp_path / "timeline.html"
    write_page(odd_checkpoint, "KING:", out)
    page = open_page(out)
    page.set_viewport_size({"width": width, "height": 1200})
    keys = page.evaluate(
        """() => Array.from(document.querySelectorAll('#tl-legend .tl-key'), (key) =>
          [key.textContent, getComputedStyle(key.querySelector('.tl-swatch')).backgroundColor])"""
    )
    lines = page.evaluate(
        """() => Array.from(document.querySelector('#tl-roles svg').querySelectorAll('polyline'), (line) =>
          [line.querySelector('title').textContent.split(':')[0], getComputedStyle(line).stroke])"""
    )
    assert [name for name, _ in keys] == [f"head {layer}.{head}" for layer in range(2) for head in range(2)]
    assert keys == lines  # each key has its head's line colour
    assert len({colour for _, colour in keys}) == 4
    probe = read_timeline(odd_checkpoint.parent / FILE_NAME)[0]["probe"]
    margin, cell = page.evaluate("[tinygptTimeline.margin, tinygptTimeline.cell]")
    assert margin >= 10
    canvas = page.locator("#tl-maps canvas").first
    assert int(canvas.get_attribute("width")) == margin + len(probe) * cell
    inked = page.evaluate(  # the characters along the top: pixels darker than the background
        """(margin) => {
          const canvas = document.querySelector('#tl-maps canvas');
          const row = canvas.getContext('2d').getImageData(margin, 0, canvas.width - margin, margin).data;
          let n = 0;
          for (let at = 0; at < row.length; at += 4) if (row[at + 3] > 0) n++;
          return n;
        }""",
        margin,
    )
    assert inked > len(probe)  # a few pixels of each labelled character at least
