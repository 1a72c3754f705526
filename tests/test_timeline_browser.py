"""The page's timeline in headless Chromium: the slider shows each step's own stored attention."""

import pytest
from test_page_browser import browser, open_page  # noqa: F401 (fixtures)

from tinygpt.explain.page import write_page
from tinygpt.explain.roles import ROLES
from tinygpt.snapshots import FILE_NAME, read_timeline

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
          const ctx = canvas.getContext("2d"), cell = tinygptTimeline.cell;
          return cells.map(([i, j]) =>
            Array.from(ctx.getImageData(j * cell + cell / 2, i * cell + cell / 2, 1, 1).data.slice(0, 3)));
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
