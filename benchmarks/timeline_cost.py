"""What recording the timeline costs at a config's size: a snapshot's time against the training
between two evaluations, and a snapshot's size in timeline.jsonl.

    python benchmarks/timeline_cost.py --config configs/cpu.yaml [--steps 20] [--snapshots 3] [--json OUT]

One process, set up as `tinygpt train` sets it up. The training one snapshot is set
against is what a run does per evaluation: train.eval_interval steps (the median of
--steps timed steps, after two untimed ones) and the evaluation itself (estimate_loss,
timed once). A snapshot is timed --snapshots times (median) on the model after those
steps; its size is its line's bytes, and the run's file is one line per evaluation.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

from tinygpt.app.bench import single_process_trainer, synchronize
from tinygpt.config.run_config import load_config
from tinygpt.explain.timeline import Recorder
from tinygpt.training.step import estimate_loss


def timed(work, device) -> float:
    synchronize(device)
    start = time.perf_counter()
    result = work()
    synchronize(device)
    return time.perf_counter() - start, result


def measure(config_path: str, overrides: list[str], steps: int, snapshots: int) -> dict:
    config = load_config(config_path, overrides)
    t = config.train
    trainer = single_process_trainer(config)
    device = trainer.ranks.device
    step_times = [timed(lambda i=i: trainer.step(i), device)[0] for i in range(2 + steps)][2:]
    eval_s, losses = timed(
        lambda: estimate_loss(
            trainer.model, trainer.splits, t.eval_iters, t.seed + 1, trainer.precision.autocast, trainer.ranks
        ),
        device,
    )
    c = trainer.corpus
    recorder = Recorder(c.tokenizer, c.val, config.model.block_size, t.timeline_probe)
    shots = [
        timed(lambda: recorder.snapshot(trainer.model, steps, losses["train"], losses["val"]), device)
        for _ in range(snapshots)
    ]
    snapshot_s = statistics.median(s for s, _ in shots)
    line_bytes = len((json.dumps(shots[-1][1]) + "\n").encode())
    evaluations = t.max_iters // t.eval_interval + 1 + (1 if t.max_iters % t.eval_interval else 0)
    interval_s = statistics.median(step_times) * t.eval_interval + eval_s
    return {
        "config": config_path,
        "overrides": overrides,
        "device": str(device),
        "dtype": trainer.precision.dtype,
        "step_s": statistics.median(step_times),
        "eval_interval": t.eval_interval,
        "evaluation_s": eval_s,
        "training_per_evaluation_s": interval_s,
        "snapshot_s": snapshot_s,
        "snapshot_share_of_training": snapshot_s / interval_s,
        "snapshot_bytes": line_bytes,
        "evaluations": evaluations,
        "timeline_bytes": line_bytes * evaluations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/cpu.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps (default 20)")
    parser.add_argument("--snapshots", type=int, default=3, help="timed snapshots (default 3)")
    parser.add_argument("--json", metavar="OUT", help="also write the result to this JSON file")
    args = parser.parse_args()
    r = measure(args.config, args.set, args.steps, args.snapshots)
    print(
        f"{r['config']} on {r['device']} ({r['dtype']}): a training step {r['step_s']:.3f} s, "
        f"an evaluation {r['evaluation_s']:.2f} s, so {r['training_per_evaluation_s']:.1f} s of "
        f"training per evaluation ({r['eval_interval']} steps + the evaluation)"
    )
    print(
        f"a snapshot: {r['snapshot_s']:.3f} s = {100 * r['snapshot_share_of_training']:.2f}% of that; "
        f"{r['snapshot_bytes'] / 1e3:.0f} kB, so {r['timeline_bytes'] / 1e6:.2f} MB of timeline.jsonl "
        f"for the run's {r['evaluations']} evaluations"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
