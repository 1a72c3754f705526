"""Training steps and generation at 1 thread, 2 threads and `auto`, on a quiet machine and with one core
kept busy, all interleaved in one process.

    python benchmarks/threads.py --rounds 5 --out benchmarks/results/threads.json

Each round takes every measurement once, in turn (the settings in a shuffled order): for each condition
(`quiet`: as the machine is; `busy`: another process spinning `while True: pass` for the round) and each
thread setting (1, 2, auto), a burst of --steps training steps of cpu.yaml's shape (4 layers × 128,
block 64, batch 24, Muon, float32, on a generated corpus: the speed does not depend on the text) and a
burst of --chars generated characters at cpu.yaml's shape and at 6 × 384 (shakespeare_char's, block 256;
untrained, seeded). `auto` starts afresh each burst (tinygpt.threads.Threads): its figure includes the
steps it spends measuring, as a run's does. Training steps are real optimizer steps (the weights move;
the speed does not care). Prints, per condition, the median of the bursts of each setting and its ratio
to 1 thread; --out writes every burst as JSON. "quiet" is only as quiet as the machine: the load average
is printed before each round.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

import torch

from tinygpt.app.bench import single_process_trainer
from tinygpt.config.run_config import from_dict
from tinygpt.generation.sampling import stream
from tinygpt.model import GPT, GPTConfig
from tinygpt.threads import Threads, most_threads

SETTINGS = ("1", "2", "auto")
CHOSEN: list[int] = []  # the count each auto burst ended on, in order
CORES = most_threads()  # run without OMP_NUM_THREADS: torch's own count, the most auto tries
CPU_SHAPE = {"n_layer": 4, "n_head": 2, "n_embd": 128, "block_size": 64, "dropout": 0.0, "bias": False}
SHAKESPEARE_SHAPE = {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "dropout": 0.0}


def cpu_recipe(corpus: Path) -> dict:
    train = {"batch_size": 24, "optimizer": "muon", "learning_rate": 8e-3, "min_lr": 8e-4, "warmup_iters": 20}
    return {
        "model": CPU_SHAPE,
        "data": {"corpus": str(corpus)},
        "train": {**train, "device": "cpu", "dtype": "float32", "timeline": False},
    }


def threads_of(setting: str) -> Threads | None:
    """None for a fixed count (set here), a fresh auto chooser otherwise (among 1 to the cores found at
    the start: torch's count is changed by the fixed settings)."""
    if setting == "auto":
        return Threads(range(1, CORES + 1))
    torch.set_num_threads(int(setting))
    return None


def training_burst(trainer, setting: str, steps: int, first: int) -> float:
    """The median seconds of `steps` optimizer steps (from step `first`) at the setting."""
    threads, times = threads_of(setting), []
    for step in range(first, first + steps):
        start = time.perf_counter()
        if threads is None:
            trainer.step(step)
        else:
            threads.run(trainer.step, step)
        times.append(time.perf_counter() - start)
    if threads is not None:
        CHOSEN.append(threads.chosen)
    return statistics.median(times)


def generation_burst(model: GPT, setting: str, chars: int) -> float:
    """Characters a second over `chars` new characters, from a one-character prompt, at the setting."""
    threads = threads_of(setting)
    prompt, generator = torch.zeros(1, 1, dtype=torch.long), torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in stream(model, prompt, chars, generator=generator, threads=threads):
        pass
    if threads is not None:
        CHOSEN.append(threads.chosen)
    return chars / (time.perf_counter() - start)


def one_round(models, trainer, args, busy: bool, first_step: int, order: random.Random) -> dict:
    """Each setting's bursts, the settings in a shuffled order: a burst runs faster or slower for the one
    before it (the other process moves between cores), so no setting always follows the same one."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        found = {}
        for setting in order.sample(SETTINGS, len(SETTINGS)):
            if setting != "auto" and int(setting) > CORES:
                continue
            found[f"train {setting}"] = training_burst(trainer, setting, args.steps, first_step)
            for name, model in models.items():
                found[f"generate {name} {setting}"] = generation_burst(model, setting, args.chars)
            if setting == "auto":
                found["auto chose"] = CHOSEN[-1 - len(models) :]  # training's, then each model's
        return found
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def report(bursts: dict) -> list[str]:
    lines = []
    for condition, rounds in bursts.items():
        lines.append(f"{condition}:")
        keys = sorted({k for r in rounds for k in r}, key=lambda k: (k.rsplit(" ", 1)[0], k))
        for key in keys:
            values = [r[key] for r in rounds if key in r]
            median = statistics.median(values)
            what, setting = key.rsplit(" ", 1)
            one = statistics.median([r[f"{what} 1"] for r in rounds])
            ratio = one / median if what == "train" else median / one  # > 1: faster than 1 thread
            unit = f"{median * 1e3:7.1f} ms a step" if what == "train" else f"{median:7.0f} characters/s"
            lines.append(f"  {what:28s} threads {setting:4s} {unit}   {ratio:.2f}x 1 thread's speed")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12, help="training steps a burst")
    parser.add_argument("--chars", type=int, default=200, help="generated characters a burst")
    parser.add_argument("--out", help="write every burst here as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        rng = random.Random(0)
        corpus.write_text("".join(rng.choice("abcdefghij klmnop\n") for _ in range(300_000)))
        trainer = single_process_trainer(from_dict(cpu_recipe(corpus)))
        torch.manual_seed(0)
        models = {
            name: GPT(GPTConfig(vocab_size=65, **shape)).eval()
            for name, shape in (("4x128", CPU_SHAPE), ("6x384", SHAKESPEARE_SHAPE))
        }
        for model in models.values():  # warm-up: first calls allocate
            generation_burst(model, "1", 20)
        bursts, step, order = {"quiet": [], "busy (one core spinning)": []}, 0, random.Random(1)
        for r in range(args.rounds):
            load = os.getloadavg()[0]
            print(f"round {r + 1}/{args.rounds}: load average {load:.2f}", file=sys.stderr)
            for condition in bursts:
                found = one_round(models, trainer, args, condition != "quiet", step, order)
                step += args.steps * len(SETTINGS)
                bursts[condition].append(found | {"load_average": load})
    print(f"torch {torch.__version__}, {CORES} threads at most, {os.cpu_count()} CPUs")
    print("\n".join(report({c: [{k: v for k, v in r.items() if k not in ("load_average", "auto chose")}
                                 for r in b] for c, b in bursts.items()})))  # fmt: skip
    for condition, rounds in bursts.items():
        print(
            f"auto chose, {condition} (training, 4x128, 6x384 a round): {[r['auto chose'] for r in rounds]}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(bursts, indent=1) + "\n")


if __name__ == "__main__":
    main()
