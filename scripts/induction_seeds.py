"""Train configs/induction.yaml with several seeds and thread counts, timed: how reliably, how fast it forms.

    python scripts/induction_seeds.py                          # seeds 1-5, 1 thread, then 2 threads
    python scripts/induction_seeds.py --seeds 1 2 --threads 1 --steps 5000 --out /tmp/seeds
    python scripts/induction_seeds.py --threads 1 --set train.optimizer=adamw --json /tmp/adamw.json

Each run is `python scripts/train.py --config configs/induction.yaml` in a fresh process with
OMP_NUM_THREADS set (the number of threads changes the order of float sums, so the trajectory
too), into OUT/tN_seedS. From each run's timeline: the step at which a layer-1 head first cleared
the induction threshold, and the layer-0 head's previous-token score and label at the end; with
the wall time of the whole command and the load average just before it (the machine may be
shared: the steps do not depend on the load, the seconds do). Writes docs/circuits_figures.json,
which README.md and docs/circuits.md quote as the functions at the end of this file put them in
words (tests/explain/test_circuits.py checks that they do). With
`--set`, every run gets those changes to the config too, and the figures name them.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # works from a plain checkout too

import torch

from tinygpt.explain.roles import THRESHOLDS, label
from tinygpt.explain.timeline import first_cleared, timeline_of
from tinygpt.files.atomic import write_atomic
from tinygpt.files.checkpoint import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/induction.yaml"
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")  # what decides float32 against bfloat16 speed


def cpu() -> dict:
    """The CPU's model name and which of FLAGS it has (Linux: /proc/cpuinfo), and its core count."""
    info = Path("/proc/cpuinfo")
    text = info.read_text() if info.is_file() else ""
    names = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
    lines = [line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")]
    flags = set(lines[0] if lines else [])
    return {
        "model": names[0] if names else platform.processor(),
        "flags": [f for f in FLAGS if f in flags],
        "cores": os.cpu_count(),
    }


def train_one(seed: int, threads: int, out: Path, steps: int | None, changes: list[str]) -> dict:
    """Train one seed on `threads` threads into out, timed; returns the command's wall time and load."""
    argv = [sys.executable, str(ROOT / "scripts" / "train.py"), "--config", CONFIG, "--quiet"]
    argv += ["--set", f"train.seed={seed}", "--set", f"out_dir={out}"]
    argv += [arg for change in changes for arg in ("--set", change)]
    argv += ["--set", f"train.max_iters={steps}"] if steps else []  # after the changes: --steps wins
    load = os.getloadavg()[0]
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": str(threads)}, check=True)
    return {"wall_s": round(time.perf_counter() - started, 1), "load_before": round(load, 2)}


def measured(run: Path) -> dict:
    """From a finished run: its steps, training time, the step its induction head formed, the layer-0 head."""
    snapshots = timeline_of(run)
    record = read_checkpoint(run / "last.pt").record
    formed = [step for step, layer, _ in first_cleared(snapshots)["induction"] if layer >= 1]
    layer0 = [h for h in snapshots[-1]["heads"] if h["layer"] == 0]
    later = [h for h in snapshots[-1]["heads"] if h["layer"] >= 1]
    previous = max(layer0, key=lambda h: h["scores"]["previous"])
    return {
        "steps": record["step"],
        "train_s": round(record["wall_time_s"], 1),
        "formed": formed[0] if formed else None,
        "previous": round(previous["scores"]["previous"], 2),
        "previous_label": label(previous["scores"]),
        "induction": round(max(h["scores"]["induction"] for h in later), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--steps",
        type=int,
        help="cut each run to this many steps (the learning rate is constant, so the steps "
        "before are the full run's)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="change the config for every run"
    )
    parser.add_argument("--out", default="checkpoints/induction_seeds", help="where the runs go")
    parser.add_argument("--json", default=str(ROOT / "docs" / "circuits_figures.json"))
    args = parser.parse_args(argv)
    for threads in args.threads:
        for seed in args.seeds:
            out = (Path(args.out) / f"t{threads}_seed{seed}").resolve()
            timing = train_one(seed, threads, out, args.steps, args.set)
            run = {"seed": seed, "threads": threads, **measured(out), **timing}
            print(json.dumps(run), flush=True)
            record(Path(args.json), run, args.set)
    print(f"wrote {args.json}")
    return 0


def record(path: Path, run: dict, changes: list[str]) -> None:
    """Add run to the figures at path, in place of an earlier run of the same seed and threads, so that
    several invocations (say one per thread count) can fill one file, each run as soon as it is done.
    Runs made with other changes to the config are dropped: one file holds one recipe."""
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    kept = old.get("runs", []) if old.get("changes", []) == changes else []
    runs = [r for r in kept if (r["threads"], r["seed"]) != (run["threads"], run["seed"])] + [run]
    figures = {
        "config": CONFIG,
        "changes": changes,
        "cpu": cpu(),
        "torch": torch.__version__,
        "threshold": THRESHOLDS["induction"],
        "runs": sorted(runs, key=lambda r: (r["threads"], r["seed"])),
    }
    write_atomic(path, json.dumps(figures, indent=1) + "\n")


# ---------------------------------------------------------------- the figures in words
# scripts/circuit_figures.py writes these into docs/circuits.md and README.md.


def seed_rows(figures: dict) -> str:
    """The seeds' table: the step each run's induction head formed at, its layer-0 head, its wall time."""
    rows = [
        "| threads | seed | steps run | induction head formed at step | layer 0 at the end: previous (label) "
        "| layer 1 at the end: induction | wall time | load average before |",
        "|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in figures["runs"]:
        formed = f"{r['formed']:,}" if r["formed"] is not None else f"not in {r['steps']:,}"
        rows.append(
            f"| {r['threads']} | {r['seed']} | {r['steps']:,} | {formed} | "
            f"{r['previous']:.2f} ({r['previous_label']}) | {r['induction']:.2f} | {r['wall_s']:.0f} s | "
            f"{r['load_before']:.1f} |"
        )
    return "\n".join(rows)


def seed_block(figures: dict) -> str:
    """Where and with which recipe the seeds ran, then their table."""
    changes = " ".join(f"--set {c}" for c in figures.get("changes", []))
    recipe = f"`{figures['config']}` " + (f"with `{changes}`" if changes else "as shipped")
    return f"Seeds run on: {machine(figures)}; {recipe}.\n\n{seed_rows(figures)}"


def machine(figures: dict) -> str:
    """The CPU the seeds ran on, in words: its model, cores and the flags that decide float32 speed."""
    cpu = figures["cpu"]
    return f"{cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])}, torch {figures['torch']}"


def span(values: list[float], digits: int = 0) -> str:
    """'low-high' of values, or the one value when they are all equal (at `digits` decimals)."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def timing(figures: dict, threads: int) -> str:
    """One clause for README.md: the steps at which the seeds formed, and the wall time, on `threads`."""
    runs = [r for r in figures["runs"] if r["threads"] == threads]
    formed = [r["formed"] for r in runs if r["formed"] is not None]
    where = f"formed in {len(formed)} of {len(runs)} seed{'s' if len(runs) > 1 else ''}"
    if formed:
        where += (
            f", between step {min(formed):,} and step {max(formed):,}"
            if len(formed) > 1
            else f", at {formed[0]:,}"
        )
    per_1000 = span([1000 * r["wall_s"] / r["steps"] for r in runs])
    loads = span([r["load_before"] for r in runs], 1)
    slowest = max((r["formed"] * r["wall_s"] / r["steps"] for r in runs if r["formed"]), default=0)
    within = f", so each within about {slowest:.0f} s of starting" if len(formed) == len(runs) else ""
    return (
        f"on {threads} thread{'s' if threads > 1 else ''} the induction head {where}, at {per_1000} s of "
        f"wall time per 1,000 steps{within} (the machine's load average {loads} when a run started)"
    )


if __name__ == "__main__":
    sys.exit(main())
