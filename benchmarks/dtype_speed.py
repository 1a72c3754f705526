"""Training speed of one config in float32 and in bfloat16, interleaved in one process, as a ratio.

    python benchmarks/dtype_speed.py --config configs/cpu.yaml [--json out.json]

Both trainers take `tinygpt train`'s exact step in turn, a few steps at a time, so
both see the same machine load. What CPU features torch may use can be capped
with environment variables, to see what a CPU without bfloat16 instructions does:

    ONEDNN_MAX_CPU_ISA=AVX512_CORE python benchmarks/dtype_speed.py ...   # AVX-512, no BF16
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python ...           # AVX2 only
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

from tinygpt.app.bench import single_process_trainer, synchronize
from tinygpt.config.run_config import load_config
from tinygpt.device import pick_device
from tinygpt.training.precision import cpu_multiplies_bfloat16, prepare_device

DTYPES = ("float32", "bfloat16")


def measure(config_path: str, overrides: list[str], rounds: int, steps_per_round: int) -> dict:
    """Median step time of each precision over `rounds` interleaved rounds, after one untimed step each."""
    configs = {dtype: load_config(config_path, [*overrides, f"train.dtype={dtype}"]) for dtype in DTYPES}
    device = pick_device(configs["float32"].train.device)
    prepare_device(device)
    trainers = {dtype: single_process_trainer(config, device) for dtype, config in configs.items()}
    times = {dtype: [] for dtype in DTYPES}
    for trainer in trainers.values():  # warm-up
        trainer.step(0)
    for _ in tqdm(range(rounds), desc="interleaved rounds"):
        for dtype, trainer in trainers.items():
            for _ in range(steps_per_round):
                synchronize(device)
                start = time.perf_counter()
                trainer.step(1)
                synchronize(device)
                times[dtype].append(time.perf_counter() - start)
    tokens = {dtype: t.tokens_per_step / statistics.median(times[dtype]) for dtype, t in trainers.items()}
    return {
        "config": config_path,
        "overrides": overrides,
        "device": str(device),
        "cpu_multiplies_bfloat16": cpu_multiplies_bfloat16(),
        "feature_caps": {
            name: os.environ.get(name) for name in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
        },
        "steps_timed_each": rounds * steps_per_round,
        "tokens_per_s": tokens,
        "bfloat16_vs_float32": tokens["bfloat16"] / tokens["float32"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps-per-round", type=int, default=2)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    result = measure(args.config, args.set, args.rounds, args.steps_per_round)
    speeds = result["tokens_per_s"]
    print(
        f"{args.config}: float32 {speeds['float32']:,.0f} tokens/s, "
        f"bfloat16 {speeds['bfloat16']:,.0f} tokens/s "
        f"({result['bfloat16_vs_float32']:.2f}×); feature caps {result['feature_caps']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
