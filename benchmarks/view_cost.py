"""How long each view of a model takes: `explain --html`, `inspect --heads`, `inspect --circuits` and a
notebook view (importing torch, then loading the model and a first view, then a second view in the same
process), on random-weight checkpoints of three sizes, for two trees of tinygpt side by side (e.g. the
code before issue 38 and after), interleaved.

    python benchmarks/view_cost.py --make DIR          # the checkpoints (once)
    python benchmarks/view_cost.py --time DIR --tree before=/path/src --tree after=/path/src \
        [--repeats 3] [--sizes cpu,10M,25M] [--deep] [--out FILE.json]

The weights are untrained (what a view costs does not depend on their values); each checkpoint's
config names a generated corpus file beside it (speaker lines of random words, as the tests make), so
the head scores, the ablation means and the circuit view are all computed. Each command runs in a
fresh process with PYTHONPATH at the tree; the run directory's cache/ is removed before `inspect
--heads`, `explain --html` and the notebook, so those start cold; `inspect --heads` again and `inspect
--circuits` run on the scores the first `inspect --heads` kept. Prints a table of medians and the after/before
ratio; --out keeps every time. --deep adds the neurons' and the features' views: `inspect --neurons`
cold and again, `features --layer 1` (training the dictionary, its default 600,000 positions),
`inspect --features` on it, and `explain --html` again with that feature file beside the checkpoint
(cold but for it: cache/ was removed before `features`), which adds the page's features section. A tree
reads only the feature files of its own format.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = {  # name: (n_layer, n_head, n_embd, block_size)
    "cpu": (4, 2, 128, 64),  # configs/cpu.yaml's shape, 0.8M parameters (the README's model)
    "10M": (6, 6, 384, 256),  # configs/shakespeare_char.yaml's shape, 10.65M
    "25M": (8, 8, 512, 256),  # about 25M
}
PROMPT = "ROMEO: To be, or not to be"
WORDS = (
    "the king and queen of a fair land spoke to their lords with grace and wit but night fell soon "
    "upon the hall where the fool sang of love and war ROMEO JULIET to be or not"
).split()


def corpus_text(n_lines: int = 20_000, seed: int = 0) -> str:
    """Speaker lines and speeches of random words (about 1.2M characters), every character of PROMPT."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        speaker = rng.choice(["ROMEO", "JULIET", "KING", "FOOL"])
        speech = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10)))
        lines.append(f"{speaker}:\n{speech.capitalize()}, {rng.choice(WORDS)}.\n")
    return "\n".join(lines)


def make(directory: Path) -> None:
    """Write corpus.txt and one run directory per size, each with best.pt (random weights, seed 0)."""
    import torch

    from tinygpt.config.run_config import from_dict
    from tinygpt.data.corpus import load_corpus
    from tinygpt.files.checkpoint import build_checkpoint, save_checkpoint
    from tinygpt.model import GPT, GPTConfig

    directory.mkdir(parents=True, exist_ok=True)
    corpus = directory / "corpus.txt"
    corpus.write_text(corpus_text(), encoding="utf-8")
    for name, (n_layer, n_head, n_embd, block) in SIZES.items():
        shape = {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "block_size": block}
        raw = {
            "model": {**shape, "dropout": 0.0, "bias": False},
            "data": {"corpus": str(corpus.resolve()), "val_fraction": 0.1},
            "train": {"device": "cpu", "dtype": "float32"},
            "out_dir": str((directory / name).resolve()),
        }
        cfg = from_dict(raw)
        text = load_corpus(cfg.data, block)
        torch.manual_seed(0)
        model = GPT(GPTConfig(**{**vars(cfg.model), "vocab_size": text.tokenizer.vocab_size}))
        (directory / name).mkdir(exist_ok=True)
        save_checkpoint(
            build_checkpoint(model, text.tokenizer, cfg.to_dict(), {"step": 0}), directory / name / "best.pt"
        )
        print(f"{name}: {model.num_params():,} parameters", file=sys.stderr)


NOTEBOOK = """
import sys, time
t0 = time.perf_counter()
import torch  # paid once by a notebook's kernel, by anything that uses torch
t1 = time.perf_counter()
import tinygpt
lm = tinygpt.load(sys.argv[1])
lm.attention(sys.argv[2])._repr_html_()
t2 = time.perf_counter()
lm.attention(sys.argv[2])._repr_html_()
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def commands(checkpoint: Path, page: Path, deep: bool = False) -> dict[str, tuple[bool, list[str]]]:
    """Each command timed, in order, and whether the run's cache/ (and features/) is removed before it (a
    cold start); with `deep`, the neurons' and the features' views too."""
    run = [sys.executable, "-m", "tinygpt"]
    found = {
        "inspect --heads": (True, [*run, "inspect", str(checkpoint), "--heads"]),
        "inspect --heads (again)": (False, [*run, "inspect", str(checkpoint), "--heads"]),
        "inspect --circuits (heads kept)": (False, [*run, "inspect", str(checkpoint), "--circuits"]),
        "explain --html": (True, [*run, "explain", str(checkpoint), "--prompt", PROMPT, "--html", str(page)]),
    }
    if deep:
        found |= {
            "inspect --neurons": (True, [*run, "inspect", str(checkpoint), "--neurons"]),
            "inspect --neurons (again)": (False, [*run, "inspect", str(checkpoint), "--neurons"]),
            "features --layer 1 (trains it)": (
                True,
                [*run, "features", str(checkpoint), "--layer", "1", "--quiet"],
            ),
            "inspect --features": (False, [*run, "inspect", str(checkpoint), "--features"]),
            "explain --html (with the features)": (
                False,
                [*run, "explain", str(checkpoint), "--prompt", PROMPT, "--html", str(page)],
            ),
        }
    return found


def timed(command: list[str], src: str) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def notebook(checkpoint: Path, src: str) -> tuple[float, float, float]:
    """In a new process: import torch, then tinygpt.load and a first view, then a second view (seconds)."""
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK, str(checkpoint), PROMPT], env=env, check=True, capture_output=True
    )
    importing, first, second = map(float, done.stdout.split()[-3:])
    return importing, first, second


def one_round(run_dir: Path, trees: dict[str, str], times: dict, deep: bool) -> None:
    """Every command once for every tree, in turn, the run's cache removed before each cold one."""
    for tree, src in trees.items():
        page = run_dir / f"page.{tree}.html"
        for what, (cold, command) in commands(run_dir / "best.pt", page, deep).items():
            if cold:
                shutil.rmtree(run_dir / "cache", ignore_errors=True)
                shutil.rmtree(run_dir / "features", ignore_errors=True)
            times.setdefault(what, {}).setdefault(tree, []).append(timed(command, src))
        shutil.rmtree(run_dir / "cache", ignore_errors=True)
        named = ("notebook: import torch", "notebook: load and a first view", "notebook: the same view again")
        for what, seconds in zip(named, notebook(run_dir / "best.pt", src), strict=True):
            times.setdefault(what, {}).setdefault(tree, []).append(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make", type=Path)
    parser.add_argument("--time", type=Path)
    parser.add_argument("--tree", action="append", default=[], help="NAME=SRC, in the order to run them")
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--deep", action="store_true", help="also inspect --neurons, features, inspect --features"
    )
    args = parser.parse_args()
    if args.make:
        make(args.make)
        return
    trees = dict(t.split("=", 1) for t in args.tree)
    results = {}
    for size in args.sizes.split(","):
        times: dict = {}
        for _ in range(args.repeats):
            one_round(args.time / size, trees, times, args.deep)
        results[size] = times
        for what, by_tree in times.items():
            medians = {tree: statistics.median(ts) for tree, ts in by_tree.items()}
            names = list(medians)
            ratio = medians[names[0]] / medians[names[-1]] if len(names) > 1 else 1.0
            cells = "  ".join(f"{tree} {m:7.2f} s" for tree, m in medians.items())
            print(f"{size:>4}  {what:<24} {cells}  {ratio:5.1f}×", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
