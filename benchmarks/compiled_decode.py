"""Would a compiled decode step pay on this CPU? Its compile cost, cold and from disk, against its gain.

    OMP_NUM_THREADS=1 python benchmarks/compiled_decode.py --layers 4 --width 128 --heads 4 --block 64

Runs the measurement twice, each in a fresh process with the same TORCHINDUCTOR_CACHE_DIR
(emptied first): the first compiles cold, the second finds inductor's compiled code on
disk (what a second `tinygpt sample` would pay). Each process builds the same seeded
untrained model (vocabulary 65, no biases), times cached generation with tinygpt.generation.fused_step's
Decoder.step as it is (eager), then compiled (torch.compile(…, dynamic=True)), the compile and the
first block_size + 5 characters timed together, then both again in turns (greedy, so the
outputs must match). It prints the break-even: how many characters the compile costs.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too


def measure(layers: int, width: int, heads: int, block: int, tokens: int) -> dict:
    import torch

    from tinygpt.generation import fused_step as decode
    from tinygpt.generation.sampling import generate
    from tinygpt.model import GPT, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=65, block_size=block, n_layer=layers, n_head=heads, n_embd=width, bias=False
    )
    model, prompt = GPT(config).eval(), torch.zeros((1, 1), dtype=torch.long)
    eager_step = decode.Decoder.step

    def rate() -> tuple[float, torch.Tensor]:
        start = time.perf_counter()
        out = generate(model, prompt, tokens, temperature=0)
        return tokens / (time.perf_counter() - start), out

    generate(model, prompt, 20)
    start = time.perf_counter()
    compiled_step = torch.compile(eager_step.__wrapped__, dynamic=True)  # inside stream's inference_mode
    decode.Decoder.step = compiled_step
    generate(model, prompt, block + 5, temperature=0)  # past a refill: every cache length it will see
    compile_seconds = time.perf_counter() - start
    rates: dict[str, list[float]] = {"eager": [], "compiled": []}
    outputs = {}
    for _ in range(3):
        for name, step in (("eager", eager_step), ("compiled", compiled_step)):
            decode.Decoder.step = step
            tokens_per_s, outputs[name] = rate()
            rates[name].append(tokens_per_s)
    eager, compiled = statistics.median(rates["eager"]), statistics.median(rates["compiled"])
    saved_per_token = 1 / eager - 1 / compiled
    return {
        "compile_and_first_seconds": compile_seconds,
        "tokens_per_s": rates,
        "speedup": compiled / eager,
        "break_even_tokens": compile_seconds / saved_per_token if saved_per_token > 0 else None,
        "same_output": bool(torch.equal(outputs["eager"], outputs["compiled"])),
    }


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    for name, default in (("layers", 4), ("width", 128), ("heads", 4), ("block", 64), ("tokens", 500)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--json", help="also write the result to this JSON file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = (args.layers, args.width, args.heads, args.block, args.tokens)
    if args.child:
        print(json.dumps(measure(*sizes)))
        return
    cache = Path(tempfile.gettempdir()) / "tinygpt_compiled_decode_cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": str(cache)}
    command = [
        sys.executable,
        __file__,
        "--child",
        *(
            f"--{k}={v}"
            for k, v in vars(args).items()
            if k in ("layers", "width", "heads", "block", "tokens")
        ),
    ]
    result = {"sizes": dict(zip(("layers", "width", "heads", "block", "tokens"), sizes, strict=True))}
    for run in ("cold", "warm_disk_cache"):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        result[run] = json.loads(done.stdout.strip().splitlines()[-1])
        print(run, json.dumps(result[run]), flush=True)
    result["load_average"] = os.getloadavg()[0]
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
