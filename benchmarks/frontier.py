"""The time-to-loss frontier: the best whole-split validation loss reached within fixed budgets of
training time, for tinygpt's recipe at each budget and for nanoGPT's two shakespeare_char recipes.

    python benchmarks/frontier.py --nanogpt /tmp/nanogpt --corpus ../shared/data/tinyshakespeare.txt \\
        --minutes 1 2 5 10 15 30 --json benchmarks/results/frontier/frontier.json \\
        --plot benchmarks/results/frontier/frontier.svg

Every run trains in the same process, in time slices taken in turn (so all see the same machine
load), each on its own clock, which stops while it is evaluated on the whole validation split.

tinygpt trains one run per budget, with the recipe chosen for that budget (RECIPES below) and its
schedule fitted to end at the budget: the script times a few steps of the recipe first and sets
`train.max_iters` to the steps that fit, then fits it again under the interleaved run's own load
(steps there are slower than alone: the runs share the caches): when the run's clock passes 15% of its
budget, max_iters becomes the steps its own rate so far fits into the budget, and again at half and at
80% (REFITS), each time at the rate since the fit before (a shared machine's speed drifts: a 15-minute
run fitted once was stopped at 94% of its steps, before its decay). A run whose clock still reaches
its budget before its last step is stopped and scored there; one without dropout is fitted to at
most the steps that read 10M characters (READ_AT_MOST: more make it worse), so it may end before its
budget. nanoGPT runs each of its recipes once, for the longest budget, and is scored when its clock
passes each budget (or when its recipe ends): a run whose schedule is fixed in steps does not need
one run per budget. Its CPU recipe is its README's
CPU command; its shakespeare_char recipe is config/train_shakespeare_char.py as written for a GPU
(10.65M parameters, dropout 0.2), run on this CPU. Both are imported from --nanogpt (model.py) and
stepped as its train.py steps (compare.py's `reference`); nothing of nanoGPT is copied here.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

from compare import REFERENCE_CPU_RECIPE, REFERENCE_CPU_TRAIN, Run, import_nanogpt, ours, reference, write_svg

from tinygpt.app.bench import training_speed
from tinygpt.app.evaluate import split_loss
from tinygpt.config.run_config import RunConfig, TrainSection, load_config
from tinygpt.data.corpus import load_corpus
from tinygpt.device import pick_device
from tinygpt.training.distributed import ONE_PROCESS
from tinygpt.training.precision import prepare_device, resolve_dtype
from tinygpt.training.step import global_batch

# (longest budget in minutes, config, why, overrides where the run is in float32): the first whose
# budget is at least the run's is used
RECIPES = [
    (
        2,
        "configs/cpu_quick.yaml",
        "cpu.yaml's shape; a short run gains most from the highest rate Muon takes",
        [],
    ),
    (10, "configs/cpu.yaml", "4 x 128, block 64, batch 24: many cheap steps", []),
    (15, "configs/cpu_long.yaml", "4 x 128 at block 128: more context once there is time to learn it", []),
    (
        30,
        "configs/cpu_large.yaml",
        "6 x 192 with dropout 0.1: past 10M characters, cpu_long.yaml's 0.8M parameters learn the training "
        "text itself; in float32 4 x 192 without dropout on the attention weights, whose steps take 0.56x "
        "as long (configs/cpu_large_float32.yaml: 1.467 in 29 minutes, BENCHMARKS.md)",
        ["model.n_layer=4", "model.attention_dropout=false"],
    ),
]

# nanoGPT's config/train_shakespeare_char.py, as written (its GPU recipe)
REFERENCE_GPU_RECIPE = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.2, bias=False)
REFERENCE_GPU_TRAIN = TrainSection(
    batch_size=64, max_iters=5000, learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, weight_decay=0.1
)


def recipe_for(minutes: float, device: torch.device) -> tuple[str, str, list[str], str]:
    """The config for a run of `minutes`, why, its overrides on this device, and the dtype it runs in."""
    config_path, why, in_float32 = next((c, w, f) for most, c, w, f in RECIPES if minutes <= most)
    dtype = resolve_dtype(load_config(config_path).train.dtype, device)
    return config_path, why, in_float32 if dtype == "float32" else [], dtype


def fitted_run(minutes: float, corpus: str, device: torch.device) -> tuple[Run, dict]:
    """tinygpt's recipe for `minutes`, its max_iters set to the steps that fit, measured here."""
    config_path, why, shape, dtype = recipe_for(minutes, device)
    config = load_config(config_path, shape + [f"data.corpus={corpus}"])
    step_s = training_speed(config, steps=8, warmup=3, progress=False)["step_s_median"]
    most = most_steps(config)
    steps = min(max(50, int(minutes * 60 / step_s)), most or sys.maxsize)
    warmup = min(config.train.warmup_iters, steps // 10)
    overrides = [*shape, f"train.max_iters={steps}", f"train.warmup_iters={warmup}"]
    run = ours(config_path, overrides, corpus, device)
    run.name, run.most_steps = f"tinygpt {minutes:g} min", most
    recipe = {
        "config": config_path,
        "overrides": shape,
        "dtype": dtype,
        "why": why,
        "max_iters": steps,
        "most_steps": most,
        "step_s_measured": step_s,
    }
    return run, recipe


def most_steps(config: RunConfig) -> int | None:
    """The steps within which a recipe without dropout reads READ_AT_MOST characters; None with dropout."""
    if config.model.dropout > 0:
        return None
    return READ_AT_MOST // (global_batch(config.train, ONE_PROCESS) * config.model.block_size)


def reference_runs(nanogpt_dir: str, data, device: torch.device) -> list[Run]:
    nanogpt = import_nanogpt(nanogpt_dir)
    vocab = data.tokenizer.vocab_size
    cpu = reference(nanogpt, REFERENCE_CPU_RECIPE, REFERENCE_CPU_TRAIN, data.train, vocab, device)
    gpu = reference(nanogpt, REFERENCE_GPU_RECIPE, REFERENCE_GPU_TRAIN, data.train, vocab, device)
    cpu.name, gpu.name = "nanoGPT CPU recipe", "nanoGPT shakespeare_char recipe"
    return [cpu, gpu]


# Characters a tinygpt run without dropout reads at most, however long its budget: past about 10M,
# cpu_long.yaml's 0.8M parameters learn the training text itself, and a budget fitted with more steps
# ends worse (BENCHMARKS.md, the frontier: 15 minutes fitted to 7,612 steps of 24 x 128, 23M characters,
# 1.528 against 1.495 at its own 3,200, 9.8M, on an AVX-512 BF16 EPYC; 4,228 steps, 13M, 1.511 against
# the 10-minute budget's 1.506 on an AVX2 EPYC). Such a run ends before its budget.
READ_AT_MOST = 10_000_000
REFITS = (0.15, 0.5, 0.8)  # shares of its budget at which a tinygpt run's max_iters is fitted to its rate
MARGIN = 0.98  # of the steps that fit, fitted: the last slice's overshoot and later slower steps


def refit(run: Run, budget_s: float, since: tuple[int, float] = (0, 0.0)) -> None:
    """max_iters set to the steps run so far and those that fit into the rest of budget_s at the rate
    stepped since `since` (a step and the run's seconds then: the last refit, so that a machine that
    slows down or speeds up is followed). The learning rate is read from the schedule every step, so
    the steps still to come follow the new one."""
    rate = (run.step - since[0]) / max(run.seconds - since[1], 1e-9)  # steps a second, lately
    steps = max(run.step + 1, run.step + int(MARGIN * rate * (budget_s - run.seconds)))
    steps = min(steps, run.most_steps or steps)
    tqdm.write(f"{run.name}: {run.step} steps in {run.seconds:.1f} s; max_iters {run.max_iters} -> {steps}")
    run.max_iters = run.schedule.max_iters = steps


def train_all(runs: list[tuple[Run, list[float]]], data, slice_s: float, device: torch.device) -> None:
    """Train every run in turn, `slice_s` at a time, scoring each when its clock passes each of its
    budgets (seconds) and when its schedule ends; each tinygpt run refitted at each of REFITS (refit)."""
    fitted = {id(run): [(0, 0.0)] for run, _ in runs if run.schedule is not None}  # (step, seconds) at each

    def evaluate(run: Run) -> None:
        loss = split_loss(run.model, data.val, batch_size=64, progress=False)
        run.curve.append((run.step, run.seconds, loss))
        tqdm.write(f"{run.name}: step {run.step}, {run.seconds:.1f} s, whole-split val loss {loss:.4f}")

    def pending(run: Run, marks: list[float]) -> bool:
        return run.step < run.max_iters and run.seconds < marks[-1]

    bar = tqdm(total=sum(marks[-1] for _, marks in runs), desc="training seconds, interleaved", unit="s")
    while any(pending(run, marks) for run, marks in runs):
        for run, marks in runs:
            if not pending(run, marks):
                continue
            before = run.seconds
            next_mark = min(m for m in marks if m > run.seconds)
            run.train_for(min(slice_s, next_mark - run.seconds), run.max_iters, device)
            bar.update(run.seconds - before)
            done = fitted.get(id(run), [])
            if done and len(done) <= len(REFITS) and run.seconds >= REFITS[len(done) - 1] * marks[-1]:
                refit(run, marks[-1], since=done[-1])
                done.append((run.step, run.seconds))
            if run.seconds >= next_mark or run.step >= run.max_iters:
                evaluate(run)
    bar.close()


def best_by(curve: list, seconds: float) -> float | None:
    """The lowest loss scored at or before `seconds` of training (a 2% allowance for the last slice)."""
    losses = [loss for _, s, loss in curve if s <= seconds * 1.02]
    return min(losses) if losses else None


def table(result: dict) -> list[dict]:
    """One row a budget: tinygpt's loss and the best each nanoGPT recipe reached by then."""
    rows = []
    for minutes in result["minutes"]:
        ours_run = result["runs"][f"tinygpt {minutes:g} min"]
        row = {
            "minutes": minutes,
            "tinygpt": ours_run["curve"][-1][2],
            "tinygpt_seconds": ours_run["seconds"],
        }
        for name in ("nanoGPT CPU recipe", "nanoGPT shakespeare_char recipe"):
            if name in result["runs"]:
                row[name] = best_by(result["runs"][name]["curve"], minutes * 60)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nanogpt", help="a nanoGPT checkout: adds its CPU and shakespeare_char recipes")
    parser.add_argument("--corpus", required=True, help="the text file to train and validate on")
    parser.add_argument("--minutes", type=float, nargs="+", default=[1, 2, 5, 10, 15, 30])
    parser.add_argument("--slice", type=float, default=2.0, help="seconds per turn (default 2)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--plot", help="write an SVG plot of loss against training seconds here")
    args = parser.parse_args()
    device = pick_device(args.device)
    prepare_device(device)
    data = load_corpus(load_config("configs/cpu.yaml", [f"data.corpus={args.corpus}"]).data, 1)
    load_before = os.getloadavg()[0]
    runs, recipes = [], {}
    for minutes in sorted(args.minutes):
        run, recipes[f"{minutes:g}"] = fitted_run(minutes, args.corpus, device)
        runs.append((run, [minutes * 60]))
    if args.nanogpt:
        marks = [m * 60 for m in sorted(args.minutes)]
        runs += [(run, marks) for run in reference_runs(args.nanogpt, data, device)]
    train_all(runs, data, args.slice, device)
    result = {
        "corpus": args.corpus,
        "minutes": sorted(args.minutes),
        "recipes": recipes,
        "runs": {
            r.name: {"steps": r.step, "max_iters": r.max_iters, "seconds": r.seconds, "curve": r.curve}
            for r, _ in runs
        },
        "torch": str(torch.__version__),
        "threads": torch.get_num_threads(),
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
        "command": " ".join(sys.argv),
    }
    result["table"] = table(result)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    if args.plot:
        frontier = {
            "runs": {
                "tinygpt, its recipe per budget": {
                    "seconds": max(r["tinygpt_seconds"] for r in result["table"]),
                    "curve": [(0, r["tinygpt_seconds"], r["tinygpt"]) for r in result["table"]],
                }
            }
            | {name: run for name, run in result["runs"].items() if name.startswith("nanoGPT")}
        }
        write_svg(frontier, args.plot, targets=[1.47])


if __name__ == "__main__":
    main()
