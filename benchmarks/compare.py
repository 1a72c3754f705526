"""tinygpt side by side with karpathy/nanoGPT, in one process, interleaved, reported as ratios.

    python benchmarks/compare.py speed    --nanogpt DIR --config configs/shakespeare_char.yaml
    python benchmarks/compare.py generate --nanogpt DIR --config configs/shakespeare_char.yaml
    python benchmarks/compare.py quality  --nanogpt DIR --corpus tinyshakespeare.txt \\
        --run configs/cpu.yaml --plot benchmarks/results/quality.svg

speed     training tokens/s of both models at the config's size and batch: ours exactly as
          `tinygpt train` steps (the config's dtype), the reference as its train.py steps on
          this device (float32 on CPU, its AdamW, its one-slice-per-row batches).
generate  new tokens/s for --tokens new characters from a one-character prompt: ours with
          and without the KV cache, the reference's generate (it re-reads the whole
          context every step).
quality   val loss on the whole validation split (`tinygpt.app.evaluate.split_loss`, float32
          for every model) against training wall-clock time, for the reference's CPU
          recipe (its README's CPU command) and any number of tinygpt runs. Every model
          trains in time slices taken in turn, so all see the same machine load; each
          has its own clock, which stops while the loss is evaluated.

Nothing of nanoGPT is copied here: its model.py is imported from --nanogpt, a
checkout of https://github.com/karpathy/nanoGPT (commit 3adf61e was measured).
"""

import argparse
import contextlib
import importlib.util
import io
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

from tinygpt.app.bench import single_process_trainer, synchronize
from tinygpt.app.evaluate import split_loss
from tinygpt.config.run_config import TrainSection, load_config
from tinygpt.data.corpus import load_corpus
from tinygpt.device import pick_device
from tinygpt.generation.sampling import generate as generate_text
from tinygpt.training.precision import prepare_device, resolve_dtype
from tinygpt.training.step import lr_at

# The reference's CPU recipe, from its README: train.py config/train_shakespeare_char.py --device=cpu
# --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4
# --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 (bias: its default, False)
REFERENCE_CPU_RECIPE = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False)
REFERENCE_CPU_TRAIN = TrainSection(
    batch_size=12, max_iters=2000, learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, weight_decay=0.1
)  # betas (0.9, 0.99) and grad_clip 1.0 are TrainSection's defaults too; its schedule is lr_at's


def import_nanogpt(directory: str) -> ModuleType:
    path = Path(directory) / "model.py"
    if not path.is_file():
        sys.exit(f"error: no model.py in {directory}; pass a nanoGPT checkout with --nanogpt")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def quietly(fn, *args, **kwargs):
    """Call fn with its prints (the reference prints parameter counts) swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


# ------------------------------------------------------------------------------------- training runs
@dataclass
class Run:
    """One model training step by step, with its own clock and its curve of (step, seconds, val loss)."""

    name: str
    model: torch.nn.Module
    step_fn: object  # step_fn(step) -> None: one optimizer step
    max_iters: int
    tokens_per_step: int
    step: int = 0
    seconds: float = 0.0
    curve: list = field(default_factory=list)
    schedule: TrainSection | None = None  # tinygpt's: the settings its learning rate is read from each step
    most_steps: int | None = None  # frontier.py fits a tinygpt run to at most these steps

    def train_for(self, seconds: float, until_step: int, device: torch.device) -> None:
        """Take steps until `seconds` have passed on this run's clock or `until_step` is reached."""
        synchronize(device)
        start = time.perf_counter()
        while self.step < until_step:  # at least one step
            self.step_fn(self.step)
            self.step += 1
            if time.perf_counter() - start >= seconds:
                break
        synchronize(device)
        self.seconds += time.perf_counter() - start


def ours(config_path: str, overrides: list[str], corpus: str | None, device: torch.device) -> Run:
    config = load_config(config_path, overrides + ([f"data.corpus={corpus}"] if corpus else []))
    trainer = single_process_trainer(config, device)
    name = "tinygpt " + " ".join([Path(config_path).stem, *overrides])
    t = config.train
    return Run(name, trainer.model, trainer.step, t.max_iters, trainer.tokens_per_step, schedule=t)


def reference(
    nanogpt: ModuleType,
    shape: dict,
    t: TrainSection,
    train_ids: torch.Tensor,
    vocab: int,
    device: torch.device,
) -> Run:
    """The reference model, optimizer and step as its train.py runs them on `device`."""
    torch.manual_seed(t.seed)
    config = nanogpt.GPTConfig(vocab_size=vocab, **shape)
    model = quietly(nanogpt.GPT, config).to(device)
    optimizer = quietly(
        model.configure_optimizers, t.weight_decay, t.learning_rate, tuple(t.betas), device.type
    )
    # its train.py: float32 on CPU; on CUDA bfloat16 autocast with a no-op scaler
    autocast = (
        contextlib.nullcontext() if device.type == "cpu" else torch.autocast(device.type, torch.bfloat16)
    )
    generator = torch.Generator().manual_seed(t.seed)
    T, B = shape["block_size"], t.batch_size

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        # as its get_batch: random starts, then one slice per row, stacked
        starts = torch.randint(len(train_ids) - T, (B,), generator=generator)
        x = torch.stack([train_ids[i : i + T].long() for i in starts])
        y = torch.stack([train_ids[i + 1 : i + 1 + T].long() for i in starts])
        return x.to(device), y.to(device)

    def step_fn(step: int) -> None:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, t)  # its get_lr: the same warm-up and cosine decay
        x, y = batch()
        with autocast:
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return Run("nanoGPT", model, step_fn, t.max_iters, B * T)


def reference_like(nanogpt: ModuleType, config_path: str, overrides: list[str], device: torch.device):
    """Our run for a config, and the reference at the same size, batch and vocabulary."""
    run = ours(config_path, overrides, None, device)
    config = load_config(config_path, overrides)
    data = load_corpus(config.data, config.model.block_size)
    shape = {k: getattr(config.model, k) for k in ("n_layer", "n_head", "n_embd", "block_size", "dropout")}
    shape["bias"] = False  # the reference's train.py default
    ref = reference(nanogpt, shape, config.train, data.train, data.tokenizer.vocab_size, device)
    return run, ref


# ------------------------------------------------------------------------------------------ speed
def speed(args: argparse.Namespace) -> dict:
    nanogpt = import_nanogpt(args.nanogpt)
    config = load_config(args.config, args.set)
    device = pick_device(config.train.device)
    prepare_device(device)
    run, ref = reference_like(nanogpt, args.config, args.set, device)
    step_times = {run.name: [], ref.name: []}
    for r in (run, ref):  # warm-up, untimed
        for _ in range(args.warmup):
            r.step_fn(0)
    for _ in tqdm(range(args.rounds), desc="interleaved rounds"):
        for r in (run, ref):
            for _ in range(args.steps_per_round):
                before = r.seconds
                r.train_for(0.0, r.step + 1, device)  # exactly one step
                step_times[r.name].append(r.seconds - before)
    tokens = {run.name: run.tokens_per_step, ref.name: ref.tokens_per_step}
    speeds = {name: tokens[name] / statistics.median(ts) for name, ts in step_times.items()}
    return {
        "config": args.config,
        "overrides": args.set,
        "dtype": resolve_dtype(config.train.dtype, device),
        "tokens_per_s": speeds,
        "steps_timed_each": len(step_times[run.name]),
        "ratio": speeds[run.name] / speeds[ref.name],
    }


# ------------------------------------------------------------------------------------- generation
def generate(args: argparse.Namespace) -> dict:
    nanogpt = import_nanogpt(args.nanogpt)
    config = load_config(args.config, args.set)
    device = pick_device(config.train.device)
    run, ref = reference_like(nanogpt, args.config, args.set, device)
    prompt = torch.zeros((1, 1), dtype=torch.long, device=device)
    contenders = {
        "tinygpt (KV cache)": lambda n: generate_text(run.model, prompt, n, use_cache=True),
        "tinygpt (no cache)": lambda n: generate_text(run.model, prompt, n, use_cache=False),
        "nanoGPT": lambda n: ref.model.generate(prompt, n),
    }
    if args.cache_only:  # the uncached run costs as much as the reference's and says little new
        del contenders["tinygpt (no cache)"]
    run.model.eval()
    ref.model.eval()
    times = {name: [] for name in contenders}
    for fn in contenders.values():
        fn(5)  # warm-up
    for _ in tqdm(range(args.repeats), desc=f"generating {args.tokens} tokens, interleaved"):
        for name, fn in contenders.items():
            synchronize(device)
            start = time.perf_counter()
            with torch.no_grad():
                fn(args.tokens)
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    speeds = {name: args.tokens / statistics.median(ts) for name, ts in times.items()}
    return {
        "config": args.config,
        "tokens": args.tokens,
        "repeats": args.repeats,
        "tokens_per_s": speeds,
        "ratio_cache_vs_reference": speeds["tinygpt (KV cache)"] / speeds["nanoGPT"],
        "ratio_no_cache_vs_reference": (
            None if args.cache_only else speeds["tinygpt (no cache)"] / speeds["nanoGPT"]
        ),
    }


# ---------------------------------------------------------------------------------------- quality
def quality(args: argparse.Namespace) -> dict:
    device = pick_device(args.device)
    prepare_device(device)
    runs = [ours(spec.split()[0], spec.split()[1:], args.corpus, device) for spec in args.run]
    data = load_corpus(load_config(args.run[0].split()[0], [f"data.corpus={args.corpus}"]).data, 1)
    if args.nanogpt:
        nanogpt = import_nanogpt(args.nanogpt)
        vocab = data.tokenizer.vocab_size
        runs.insert(
            0, reference(nanogpt, REFERENCE_CPU_RECIPE, REFERENCE_CPU_TRAIN, data.train, vocab, device)
        )

    def evaluate(r: Run) -> None:
        loss = split_loss(r.model, data.val, batch_size=64, progress=False)
        r.curve.append((r.step, r.seconds, loss))
        tqdm.write(f"{r.name}: step {r.step}, {r.seconds:.1f} s, whole-split val loss {loss:.4f}")

    for r in runs:
        evaluate(r)
    bar = tqdm(total=sum(r.max_iters for r in runs), desc="training, interleaved", unit="step")
    while any(r.step < r.max_iters for r in runs):
        for r in runs:
            if r.step >= r.max_iters:
                continue
            next_eval = min(s for s in eval_steps(r.max_iters, args.evals) if s > r.step)
            before = r.step
            r.train_for(args.slice, next_eval, device)
            bar.update(r.step - before)
            if r.step == next_eval:
                evaluate(r)
    bar.close()
    result = {
        "corpus": args.corpus,
        "val_characters": len(data.val),
        "runs": {r.name: {"steps": r.step, "seconds": r.seconds, "curve": r.curve} for r in runs},
    }
    if args.plot:
        write_svg(result, args.plot, targets=args.target)
        print(f"plot written to {args.plot}")
    return result


def eval_steps(max_iters: int, evals: int) -> list[int]:
    """`evals` steps spread evenly over the run, the last one included."""
    return sorted({max(1, round(max_iters * k / evals)) for k in range(1, evals + 1)})


# ------------------------------------------------------------------------------------------- plot
COLOURS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def write_svg(result: dict, path: str, targets: list[float]) -> None:
    """A line chart of whole-split val loss against training seconds, one line per run."""
    width, height, left, right, top, bottom = 900, 440, 64, 350, 30, 50
    runs = result["runs"]
    points = [(s, loss) for r in runs.values() for _, s, loss in r["curve"]]
    x_max = max(s for s, _ in points) * 1.02
    y_low = min(min(loss for _, loss in points), *targets) - 0.05
    y_high = min(3.0, max(loss for _, loss in points))  # the first evaluation (≈ ln 65) would squash the rest
    sx = lambda s: left + (width - left - right) * s / x_max  # noqa: E731
    sy = lambda v: top + (height - top - bottom) * (y_high - min(v, y_high)) / (y_high - y_low)  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="18" font-size="14">Validation loss (whole split) against training time</text>',
    ]
    for i in range(6):  # grid and ticks
        s = x_max * i / 5
        v = y_low + (y_high - y_low) * i / 5
        out.append(
            f'<line x1="{sx(s):.1f}" y1="{top}" x2="{sx(s):.1f}" y2="{height - bottom}" stroke="#eee"/>'
        )
        out.append(f'<text x="{sx(s):.1f}" y="{height - bottom + 16}" text-anchor="middle">{s:.0f}</text>')
        out.append(
            f'<line x1="{left}" y1="{sy(v):.1f}" x2="{width - right}" y2="{sy(v):.1f}" stroke="#eee"/>'
        )
        out.append(f'<text x="{left - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    out.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 12}" text-anchor="middle">'
        "training seconds (evaluation excluded)</text>"
    )
    for v in targets:
        out.append(
            f'<line x1="{left}" y1="{sy(v):.1f}" x2="{width - right}" y2="{sy(v):.1f}" '
            'stroke="#777" stroke-dasharray="4 4"/>'
        )
        out.append(f'<text x="{width - right + 4}" y="{sy(v) + 4:.1f}" fill="#777">{v:.2f}</text>')
    for i, (name, r) in enumerate(runs.items()):
        colour = COLOURS[i % len(COLOURS)]
        line = " ".join(f"{sx(s):.1f},{sy(loss):.1f}" for _, s, loss in r["curve"])
        out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        final = r["curve"][-1][2]
        label = f"{name}: {final:.3f} at {r['seconds']:.0f} s"
        out.append(f'<text x="{width - right + 4}" y="{top + 16 * i + 10}" fill="{colour}">{label}</text>')
    out.append("</svg>")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(out) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("speed", "generate"):
        p = commands.add_parser(name)
        p.add_argument("--nanogpt", required=True, help="a nanoGPT checkout (its model.py is imported)")
        p.add_argument("--config", required=True, help="our config; the reference gets its size and batch")
        p.add_argument("--set", action="append", default=[], help="override our config (repeatable)")
        p.add_argument("--json", help="also write the result to this JSON file")
    commands.choices["speed"].add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    commands.choices["speed"].add_argument("--steps-per-round", type=int, default=3, help="steps per turn")
    commands.choices["speed"].add_argument("--warmup", type=int, default=3, help="untimed steps first")
    commands.choices["generate"].add_argument("--tokens", type=int, default=2000, help="new tokens per run")
    commands.choices["generate"].add_argument("--repeats", type=int, default=3, help="interleaved repeats")
    commands.choices["generate"].add_argument(
        "--cache-only", action="store_true", help="leave out tinygpt without its KV cache"
    )
    p = commands.add_parser("quality")
    p.add_argument("--nanogpt", help="a nanoGPT checkout: adds the reference's CPU recipe")
    p.add_argument("--corpus", required=True, help="the text file to train and validate on")
    p.add_argument(
        "--run",
        action="append",
        required=True,
        help='a tinygpt run: "CONFIG [section.key=value ...]" (repeatable)',
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--evals", type=int, default=10, help="whole-split evaluations per run (default 10)")
    p.add_argument("--slice", type=float, default=2.0, help="seconds per turn (default 2)")
    p.add_argument("--target", type=float, action="append", default=[], help="a loss to mark on the plot")
    p.add_argument("--plot", help="write an SVG plot here")
    p.add_argument("--json", help="also write the result to this JSON file")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]  # other work on the machine skews every timing
    result = {"speed": speed, "generate": generate, "quality": quality}[args.command](args)
    result |= {
        "torch": str(torch.__version__),
        "threads": torch.get_num_threads(),
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
        "command": " ".join(sys.argv),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
