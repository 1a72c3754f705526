"""Regenerate the figures of docs/circuits.md and README.md's timing from trained runs, every number.

    python scripts/induction_seeds.py       # first: trains the seeds, writes docs/circuits_figures.json
    python scripts/circuit_figures.py --run checkpoints/induction_seeds/t1_seed1 --cpu-run checkpoints/cpu

From the induction run: docs/circuits_timeline.svg (the loss, the loss where the text repeats
and the two heads' scores at every evaluation, with the step the induction head formed),
docs/circuits.png (the explainer page's circuit view of its best.pt, taken in headless Chromium) and
the block of docs/circuits.md between `<!-- figures: induction -->` and `<!-- /figures -->`
(the timeline, `inspect --circuits` and `inspect --heads` of its best.pt). From
docs/circuits_figures.json (scripts/induction_seeds.py): the guide's `seeds` block (every seed:
the step it formed, its heads, its wall time) and README.md's `timing` block; from
docs/circuits_seeds_adamw.json, the guide's `seeds_adamw` block (the config's former AdamW recipe). From
cpu.yaml's run and any variants of it (`--cpu-run RUN [RUN ...]`), when the first is present: the
guide's block `cpu` and README.md's `default`. A run that is missing is said, and its block is left as it was.
"""

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works from a plain checkout too
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbours, also when a test loads it

from induction_seeds import machine, seed_block, timing  # noqa: E402 (scripts/, on the path)
from make_pictures import screenshots  # noqa: E402

from tinygpt.errors import UserError
from tinygpt.explain.circuits import checkpoint_circuits
from tinygpt.explain.heads import Heads, checkpoint_heads, heads_table
from tinygpt.explain.page import write_page
from tinygpt.explain.roles import THRESHOLDS
from tinygpt.explain.timeline import first_cleared, timeline_of
from tinygpt.files.atomic import write_atomic
from tinygpt.files.checkpoint import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "circuits_figures.json"  # written by scripts/induction_seeds.py
ADAMW = ROOT / "docs" / "circuits_seeds_adamw.json"  # the same, with the config's former AdamW recipe
PROMPT = "mqdtlbksae mqdtlbksae"  # a string written twice, as in the corpus: the copy sits 11 back


def circuit_picture(run: Path, heads: Heads) -> bytes:
    """The explainer page's circuit view of run's best.pt (heads as nodes, compositions as edges), as a PNG,
    with the layer-1 head that scores best for induction (of heads, its reports) picked in the grid."""
    best = max((h for h in heads.reports if h.layer == 1), key=lambda h: h.scores["induction"])
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "explain.html"
        write_page(run / "best.pt", PROMPT, page, best.layer, best.head)
        return screenshots([(page, "#circuits-section", None)])[0]


def best_of(snapshot: dict, layer: int, role: str) -> float:
    return max(h["scores"][role] for h in snapshot["heads"] if h["layer"] == layer)


def loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def formed_at(snapshots: list[dict]) -> int | None:
    """The first step a layer-1 head cleared the induction threshold, or None."""
    found = [step for step, layer, _ in first_cleared(snapshots)["induction"] if layer >= 1]
    return found[0] if found else None


W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 380, 50, 590, 20, 250  # the picture, and the plot inside it


def frame(hi: float, last_step: int) -> list[str]:
    """The picture's opening, its three axes and their end labels: losses 0 … hi, scores 0 … 1."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" font-family="sans-serif" '
        'font-size="12">',
        f'<rect width="{W}" height="{H}" fill="#fff"/>',
        f'<line x1="{LEFT}" y1="{BOTTOM}" x2="{RIGHT}" y2="{BOTTOM}" stroke="#999"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BOTTOM}" stroke="#999"/>',
        f'<line x1="{RIGHT}" y1="{TOP}" x2="{RIGHT}" y2="{BOTTOM}" stroke="#999"/>',
        f'<text x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end">{hi:.1f}</text>',
        f'<text x="{LEFT - 6}" y="{BOTTOM + 4}" text-anchor="end">0</text>',
        f'<text x="{RIGHT + 6}" y="{TOP + 4}">1</text>',
        f'<text x="{RIGHT + 6}" y="{BOTTOM + 4}">0</text>',
        f'<text x="{LEFT}" y="{BOTTOM + 18}">0</text>',
        f'<text x="{RIGHT}" y="{BOTTOM + 18}" text-anchor="end">step {last_step}</text>',
    ]


def timeline_svg(snapshots: list[dict]) -> str:
    """Losses (left axis) and the best layer-0 previous and layer-1 induction scores (right, 0-1) by step."""
    steps = [s["step"] for s in snapshots]
    hi = max(s[k] for s in snapshots for k in ("val_loss", "repeat_loss") if s[k] is not None)

    def x(step: float) -> float:
        return LEFT + (RIGHT - LEFT) * step / max(steps[-1], 1)

    def y(value: float, top: float) -> float:  # top: the value at the top of the plot
        return BOTTOM - (BOTTOM - TOP) * value / top

    series = [  # values, the axis's top, colour, dash, name
        ([s["val_loss"] for s in snapshots], hi, "#1d2330", "", "validation loss (nats, left)"),
        ([s["repeat_loss"] for s in snapshots], hi, "#1d2330", "5 4", "loss where the text repeats (left)"),
        ([best_of(s, 0, "previous") for s in snapshots], 1, "#1f5fbf", "", "layer 0: previous score (right)"),
        (
            [best_of(s, 1, "induction") for s in snapshots],
            1,
            "#e8590c",
            "",
            "layer 1: induction score (right)",
        ),
    ]
    parts = frame(hi, steps[-1])
    formed = formed_at(snapshots)
    if formed is not None:
        parts.append(
            f'<line x1="{x(formed):.1f}" y1="{TOP}" x2="{x(formed):.1f}" y2="{BOTTOM}" stroke="#e8590c" '
            f'stroke-dasharray="2 3"/><text x="{x(formed) + 4:.1f}" y="{BOTTOM - 6}" fill="#e8590c">'
            f"induction ≥ {THRESHOLDS['induction']} at step {formed}</text>"
        )
    for n, (values, top, colour, dash, name) in enumerate(series):
        style = f' stroke-dasharray="{dash}"' if dash else ""
        points = " ".join(
            f"{x(step):.1f},{y(v, top):.1f}" for step, v in zip(steps, values, strict=True) if v is not None
        )
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{style} points="{points}"/>')
        at = BOTTOM + 44 + 18 * n  # the legend, under the axis
        parts.append(
            f'<line x1="{LEFT + 70}" y1="{at - 4}" x2="{LEFT + 95}" y2="{at - 4}" stroke="{colour}" '
            f'stroke-width="2"{style}/><text x="{LEFT + 100}" y="{at}">{name}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def induction_block(run: Path, heads: Heads) -> str:
    """The induction run in words and tables, from its timeline and best.pt (heads: its reports)."""
    snapshots = timeline_of(run)
    best = run / "best.pt"
    saved = read_checkpoint(best)
    record, train = saved.record, saved.config["train"]
    formed = formed_at(snapshots)
    rows = [
        "| step | val loss | loss where the text repeats | layer 0: previous | layer 1: induction |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in snapshots:
        rows.append(
            f"| {s['step']} | {s['val_loss']:.3f} | {loss(s['repeat_loss'])} | "
            f"{best_of(s, 0, 'previous'):.2f} | {best_of(s, 1, 'induction'):.2f} |"
        )
    when = f"step {formed}" if formed is not None else "no step: it did not form"
    jump = ""
    if formed is not None:
        at = [s["step"] for s in snapshots].index(formed)
        a, b = snapshots[max(at - 2, 0)], snapshots[at]
        jump = (
            f" From step {a['step']} to step {b['step']} the best layer-1 induction score went from "
            f"{best_of(a, 1, 'induction'):.2f} to {best_of(b, 1, 'induction'):.2f}, the best layer-0 "
            f"previous score from {best_of(a, 0, 'previous'):.2f} to {best_of(b, 0, 'previous'):.2f}, and "
            f"the loss where the text repeats from {loss(a['repeat_loss'])} to {loss(b['repeat_loss'])}."
        )
    return "\n".join(
        [
            f"Run: `{run}`, {record['step']:,} steps, seed {train['seed']}, {record['dtype']} on "
            f"{record['device']}, {record['wall_time_s'] / 60:.1f} minutes of training (wall time on the "
            "machine that trained it, which may have been busy). A layer-1 head first cleared the induction "
            f"threshold ({THRESHOLDS['induction']}) at {when}.{jump}",
            "",
            *rows,
            "",
            "The best head of each layer at each evaluation; the scores are `inspect --heads`'s, on 4 probes "
            "and 4 validation windows. `inspect --circuits` on its best.pt:",
            "",
            "```text",
            checkpoint_circuits(best),
            "```",
            "",
            "`inspect --heads` on the same checkpoint:",
            "",
            "```text",
            heads_table(heads),
            "```",
        ]
    )


class CpuRun(NamedTuple):
    """What the `cpu` block and the README's `default` sentence say of one run of cpu.yaml (or a variant)."""

    path: Path
    block: int
    batch: int
    steps: int
    dtype: str
    minutes: float  # training wall time
    top: float  # the best induction score any head reached at any evaluation
    top_step: int  # where
    formed: int | None  # the step a layer-1-or-later head cleared the induction threshold


def cpu_run(run: Path) -> CpuRun:
    """run's shape from its best.pt and its best induction score from its timeline."""
    saved = read_checkpoint(run / "best.pt")
    record, model, train = saved.record, saved.config["model"], saved.config["train"]
    snapshots = timeline_of(run)
    top, step = max((h["scores"]["induction"], s["step"]) for s in snapshots for h in s["heads"])
    shape = (model["block_size"], train["batch_size"], record["step"], record["dtype"])
    return CpuRun(run, *shape, record["wall_time_s"] / 60, top, step, formed_at(snapshots))


def cpu_block(runs: list[CpuRun]) -> str:
    """What cpu.yaml's runs grew: for each, its shape and whether an induction head formed; then the first
    run's heads."""
    rows = [
        "| run | block × batch | steps | dtype | training time | best induction score, any head (step) | "
        "induction head formed |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    for r in runs:
        formed = f"at step {r.formed:,}" if r.formed is not None else "no"
        rows.append(
            f"| `{r.path}` | {r.block} × {r.batch} | {r.steps:,} | {r.dtype} | {r.minutes:.1f} min | "
            f"{r.top:.2f} ({r.top_step:,}) | {formed} |"
        )
    return "\n".join(
        [
            f"Each run's timeline, every evaluation (the induction threshold is {THRESHOLDS['induction']}; "
            "training times are wall time on a machine that may have been busy):",
            "",
            *rows,
            "",
            f"`inspect --heads` on `{runs[0].path}/best.pt`:",
            "",
            "```text",
            heads_table(checkpoint_heads(runs[0].path / "best.pt")),
            "```",
        ]
    )


def cpu_clause(runs: list[CpuRun]) -> str:
    """One sentence for README.md: whether cpu.yaml's runs grew an induction head, with their best scores."""
    formed = [f"at block {r.block} one formed at step {r.formed:,}" for r in runs if r.formed is not None]
    best = ", ".join(f"{r.top:.2f} at block {r.block}" for r in runs)
    verdict = "; ".join(formed) if formed else "no head became an induction head"
    return (
        f"In the README's first run (`configs/cpu.yaml`, block {runs[0].block}) and the same recipe with "
        f"longer windows, {verdict}: the best induction score any head reached at any evaluation was "
        f"{best} (the threshold is {THRESHOLDS['induction']})."
    )


def replace_block(text: str, name: str, body: str) -> str:
    """text with the lines between `<!-- figures: name -->` and the next `<!-- /figures -->` set to body."""
    pattern = re.compile(rf"(<!-- figures: {name} -->\n)(?:.*?\n)??(<!-- /figures -->)", re.S)  # empty too
    if not pattern.search(text):
        raise UserError(f"the doc has no <!-- figures: {name} --> … <!-- /figures --> block to fill")
    return pattern.sub(lambda m: m[1] + body + "\n" + m[2], text, count=1)


def with_seeds(doc: str, readme: str, figures_json: Path, adamw_json: Path) -> tuple[str, str]:
    """The guide's seeds blocks and the README's timing block, from scripts/induction_seeds.py's figures
    (the shipped recipe's, and the former AdamW recipe's when that file is there)."""
    figures = json.loads(figures_json.read_text(encoding="utf-8"))
    doc = replace_block(doc, "seeds", seed_block(figures))
    if adamw_json.is_file():
        adamw = json.loads(adamw_json.read_text(encoding="utf-8"))
        doc = replace_block(doc, "seeds_adamw", seed_block(adamw))
    threads = sorted({r["threads"] for r in figures["runs"]})
    clauses = "; ".join(timing(figures, t) for t in threads)
    return doc, replace_block(readme, "timing", f"On an {machine(figures)}, float32: {clauses}.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", default="checkpoints/induction", help="an induction run (configs/induction.yaml)"
    )
    parser.add_argument(
        "--cpu-run",
        nargs="+",
        default=["checkpoints/cpu"],
        help="cpu.yaml's run, then any variants of it (the block is skipped if the first is absent)",
    )
    parser.add_argument("--doc", default=str(ROOT / "docs" / "circuits.md"))
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    parser.add_argument("--svg", default=str(ROOT / "docs" / "circuits_timeline.svg"))
    parser.add_argument("--png", default=str(ROOT / "docs" / "circuits.png"), help="the circuit view")
    parser.add_argument("--figures", default=str(FIGURES), help="scripts/induction_seeds.py's figures")
    parser.add_argument("--adamw", default=str(ADAMW), help="the same for the former AdamW recipe")
    args = parser.parse_args(argv)
    try:
        doc, readme = Path(args.doc), Path(args.readme)
        text, readme_text = doc.read_text(encoding="utf-8"), readme.read_text(encoding="utf-8")
        run = Path(args.run)
        write_atomic(args.svg, timeline_svg(timeline_of(run)))
        heads = checkpoint_heads(run / "best.pt")
        write_atomic(args.png, circuit_picture(run, heads))
        text = replace_block(text, "induction", induction_block(run, heads))
        if (Path(args.cpu_run[0]) / "best.pt").is_file():
            cpu_runs = [cpu_run(Path(r)) for r in args.cpu_run]
            text = replace_block(text, "cpu", cpu_block(cpu_runs))
            readme_text = replace_block(readme_text, "default", cpu_clause(cpu_runs))
        else:
            print(f"note: no {args.cpu_run[0]}/best.pt; its blocks are left as they were", file=sys.stderr)
        text, readme_text = with_seeds(text, readme_text, Path(args.figures), Path(args.adamw))
        write_atomic(doc, text)
        write_atomic(readme, readme_text)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.svg}, {args.png}, the figures in {args.doc} and the timing in {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
