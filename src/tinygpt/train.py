"""Training: a config in, a run directory with checkpoints and metrics out.

The loop reads top to bottom in `train`: set up, then one optimizer step per
iteration, evaluating and checkpointing every eval_interval steps and always
at the last step.
"""

import math
import signal
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
import yaml
from torch.torch_version import TorchVersion
from tqdm import tqdm

from tinygpt.checkpoint import FORMAT_VERSION, model_from_payload, read_checkpoint, save_checkpoint
from tinygpt.config import RunConfig, TrainSection
from tinygpt.data import Batches, Corpus, load_corpus
from tinygpt.distributed import ONE_PROCESS, Ranks, process_group
from tinygpt.errors import UserError
from tinygpt.interrupt import Interrupted, StopRequest
from tinygpt.lock import RunLock
from tinygpt.memory import check_fits
from tinygpt.metrics import append_metrics, rewind_metrics
from tinygpt.model import GPT, GPTConfig
from tinygpt.watch import LossWatch

RESUME_ADVICE = (
    "--resume needs it: put back a good copy, or start afresh with another out_dir "
    "(best.pt, if it reads, still samples)"
)


def pick_device(name: str) -> torch.device:
    """auto → cuda, then mps, then cpu; an explicit choice must exist on this machine."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "device cuda was asked for, but CUDA is not available on this machine "
            f"(torch {torch.__version__}); use device auto or cpu"
        )
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError(
            "device mps was asked for, but Apple's MPS is not available on this machine; "
            "use device auto or cpu"
        )
    if name not in ("cpu", "cuda", "mps"):
        raise UserError(f"unknown device {name!r}; use one of auto, cpu, cuda, mps")
    return torch.device(name)


def prepare_device(device: torch.device) -> None:
    """Process-wide speed settings for training on `device`."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # TF32 tensor cores for any float32 matmuls
        torch.backends.cudnn.allow_tf32 = True


def cpu_multiplies_bfloat16() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (x86's AVX-512 BF16; AMX CPUs have them too).

    Without them each bfloat16 matmul runs a much slower path: with oneDNN capped to
    AVX-512 without BF16 (or to AVX2) on this project's Xeon, cpu.yaml trains 3× (or 28×)
    slower in bfloat16 than in float32 (BENCHMARKS.md).
    """
    probe = getattr(torch.cpu, "_is_avx512_bf16_supported", None)  # torch's own CPU feature check
    return bool(probe and probe())


def resolve_dtype(name: str, device: torch.device) -> str:
    """train.dtype auto → a 16-bit precision where `device` multiplies it natively, else float32.

    bfloat16 on CUDA GPUs with bfloat16 tensor cores (compute capability ≥ 8, Ampere on)
    and on CPUs with bfloat16 instructions; float16 (with loss scaling) on older CUDA GPUs;
    float32 elsewhere (other CPUs, MPS). The model's width is not considered: below about
    64 wide, float32 is as fast on a CPU (BENCHMARKS.md).
    """
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bfloat16" if torch.cuda.get_device_capability(device)[0] >= 8 else "float16"
    if device.type == "cpu" and cpu_multiplies_bfloat16():
        return "bfloat16"
    return "float32"


def check_compile_works(device: torch.device) -> None:
    """Compile a two-operation function first, so that a machine without what torch.compile needs
    (a C++ compiler on CPU, Triton on CUDA) stops with one clear message before training starts."""
    try:
        torch.compile(lambda x: torch.relu(x) + 1)(torch.ones(8, device=device))
    except Exception as error:  # whatever fails here would fail the first training step
        reason = next(iter(str(error).strip().splitlines()), type(error).__name__)
        raise UserError(
            f"train.compile is true, but torch.compile does not work on this machine ({reason}); "
            "install what it needs (a C++ compiler for CPU, Triton for CUDA) or set train.compile: false"
        ) from None


def autocast_for(device: torch.device, dtype: str):
    """The mixed-precision context for a training dtype (float32: none)."""
    if dtype == "float32":
        return nullcontext()
    if dtype == "float16" and device.type == "cpu":
        raise UserError("train.dtype = float16 is not supported on CPU; use bfloat16 or float32")
    return torch.autocast(device_type=device.type, dtype=getattr(torch, dtype))


@dataclass(frozen=True)
class Precision:
    """train.dtype as it runs on one device: the resolved name, its autocast context, its loss scaler."""

    dtype: str
    autocast: AbstractContextManager
    scaler: torch.amp.GradScaler  # scales float16 losses so that small gradients survive; else a no-op


def precision_for(name: str, device: torch.device) -> Precision:
    dtype = resolve_dtype(name, device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "float16")
    return Precision(dtype, autocast_for(device, dtype), scaler)


def make_optimizer(model: GPT, t: TrainSection, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (dim ≥ 2) only: biases, norms' gains stay undecayed."""
    params = [p for p in model.parameters() if p.requires_grad]  # the tied weight appears once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    assert len(decay) + len(no_decay) == len(params), "every parameter in exactly one group"
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel per tensor for the whole update, several times faster than foreach on CPU too
    # (torch ≥ 2.4 on CPU); foreach, a few batched kernels, elsewhere
    fused = device.type == "cuda" or (device.type == "cpu" and TorchVersion(torch.__version__) >= "2.4")
    return torch.optim.AdamW(groups, lr=t.learning_rate, betas=tuple(t.betas), fused=fused, foreach=not fused)


def global_batch(t: TrainSection, ranks: Ranks) -> int:
    """Sequences per optimizer step: the batch of each rank's micro-step × ranks × micro-steps."""
    return t.batch_size * ranks.world_size * t.grad_accum_steps


def lr_at(step: int, t: TrainSection) -> float:
    """Linear warm-up to learning_rate, then cosine decay to min_lr at max_iters."""
    if step < t.warmup_iters:
        return t.learning_rate * (step + 1) / (t.warmup_iters + 1)
    span = max(1, t.max_iters - t.warmup_iters)
    progress = min(1.0, (step - t.warmup_iters) / span)
    return t.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t.learning_rate - t.min_lr)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    batches: Batches,
    generator: torch.Generator,
    t: TrainSection,
    lr: float,
    ranks: Ranks = ONE_PROCESS,
) -> torch.Tensor:
    """One optimizer step over grad_accum_steps micro-batches; returns the last micro-batch's loss.

    Under DDP, gradients are averaged across ranks on the last micro-batch only.
    The loss stays on the device: reading it (.item()) would make the host wait
    for the device, so the loop does that only at log intervals.
    """
    scaler = precision.scaler
    for group in optimizer.param_groups:
        group["lr"] = lr
    for micro_step in range(t.grad_accum_steps):
        x, y = batches.sample(generator)
        with ranks.sync_gradients(model, sync=micro_step == t.grad_accum_steps - 1):
            with precision.autocast:
                _, loss = model(x, y)
            # the loss is a mean per micro-batch: scale so the summed gradients average them
            scaler.scale(loss / t.grad_accum_steps).backward()
    if t.grad_clip > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss


@torch.no_grad()
def estimate_loss(
    model: torch.nn.Module,
    splits: dict[str, Batches],
    iters: int,
    seed: int,
    autocast,
    ranks: Ranks = ONE_PROCESS,
) -> dict:
    """Mean loss over `iters` batches per split, the same batches at every evaluation.

    With several ranks, rank r evaluates batches r, r + world_size, …, and the
    sums are added up across ranks: the same mean as one process, sooner.
    """
    model.eval()
    losses = {}
    for name, batches in splits.items():
        generator = torch.Generator().manual_seed(seed)
        total = torch.zeros((), device=batches.device)
        for i in range(iters):
            x, y = batches.sample(generator)  # every rank draws every batch, to stay in step
            if i % ranks.world_size != ranks.rank:
                continue
            with autocast:
                _, loss = model(x, y)
            total += loss.float()
        losses[name] = ranks.sum(total).item() / iters
    model.train()
    return losses


class RunDirectory:
    """checkpoints/<run>/: config.yaml, metrics.jsonl, last.pt, best.pt, and a lock while in use.

    A context manager: the lock taken by `prepare` is released on leaving, however the run ends.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.last = self.path / "last.pt"
        self.best = self.path / "best.pt"
        self.metrics = self.path / "metrics.jsonl"
        self.lock = RunLock(self.path)

    def __enter__(self) -> "RunDirectory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def prepare(self, config: RunConfig, resume: bool, write: bool = True) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"out_dir {self.path} is a file, not a directory; choose another out_dir")
        if resume and not self.last.is_file():
            raise UserError(
                f"--resume: there is no {self.last} to resume from; train without --resume to start this run"
            )
        if not resume and self.last.exists():
            raise UserError(
                f"{self.path} already holds a run; add --resume to continue it, or start a "
                f"new one elsewhere with --set out_dir=checkpoints/<new name>"
            )
        if not write:  # another process (rank 0) locks and writes the run directory
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()  # before anything in the directory changes
            (self.path / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
            if not resume:  # what a run that died before its first checkpoint logged
                self.metrics.unlink(missing_ok=True)
            for partial in self.path.glob(".*.partial"):  # left by a save that was killed (we hold the lock)
                partial.unlink()
        except OSError as e:
            raise UserError(
                f"cannot write to run directory {self.path}: {e.strerror}; choose a writable out_dir"
            ) from None

    def rewind_metrics(self, step: int) -> None:
        """Forget what a run that died after last.pt logged beyond it: the resumed run logs it again."""
        rewind_metrics(self.metrics, step)

    def log(self, entry: dict[str, Any]) -> None:
        append_metrics(self.metrics, entry)


def train(config: RunConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train as config says; returns the training record (also saved in the checkpoints).

    Started by torchrun, each process trains one replica with DistributedDataParallel
    (see tinygpt.distributed); started plainly, it is one process. The run directory
    is locked for the whole run (by rank 0, which writes it). The first Ctrl-C or
    SIGTERM stops the run at the end of a step with last.pt saved, by raising
    `Interrupted` (see tinygpt.interrupt).
    """
    with (
        process_group(pick_device(config.train.device)) as ranks,
        RunDirectory(config.out_dir) as run,
        StopRequest() as stop,
    ):
        try:
            return _train(config, resume, progress, ranks, run, stop)
        except RuntimeError as error:
            if not out_of_memory(error):
                raise
            raise UserError(
                f"out of memory on {ranks.device.type}: a training step needs more than is free; make "
                "train.batch_size smaller (train.grad_accum_steps keeps the batch per optimizer step), "
                f"or model.block_size, or the model; any checkpoints already in {run.path} are intact "
                "(--resume continues from last.pt)"
            ) from None


def out_of_memory(error: RuntimeError) -> bool:
    """Whether torch's allocator ran out: on CUDA its own exception, on CPU and MPS its message."""
    message = str(error)
    return (
        isinstance(error, torch.cuda.OutOfMemoryError)
        or "can't allocate memory" in message  # CPU
        or "MPS backend out of memory" in message
    )


def _train(
    config: RunConfig, resume: bool, progress: bool, ranks: Ranks, run: RunDirectory, stop: StopRequest
) -> dict[str, Any]:
    # ---------------------------------------------------------------- set-up
    t = config.train
    device = ranks.device
    prepare_device(device)
    precision = precision_for(t.dtype, device)
    if t.compile:
        check_compile_works(device)
    corpus = ranks.in_turn(lambda: load_corpus(config.data, config.model.block_size))
    model_config = GPTConfig(vocab_size=corpus.tokenizer.vocab_size, **vars(config.model))
    check_fits(model_config, t.batch_size, device)
    saved = read_checkpoint(run.last, advice=RESUME_ADVICE) if resume and run.last.is_file() else None
    run.prepare(config, resume, write=ranks.is_main)

    torch.manual_seed(t.seed + ranks.rank)  # DDP gives every rank rank 0's weights; the rest is per rank
    if saved is not None:
        _check_same_model(saved, model_config, run.last)
        model = model_from_payload(saved, run.last)
    else:
        model = GPT(model_config)
    model.to(device)
    optimizer = make_optimizer(model, t, device)
    step_model = torch.compile(model) if t.compile else model
    step_model = ranks.wrap(step_model)  # DistributedDataParallel when there are several ranks

    splits = {"train": corpus.train, "val": corpus.val}
    eval_splits = {
        name: Batches(ids, model_config.block_size, t.batch_size, device) for name, ids in splits.items()
    }
    train_batches = eval_splits["train"]
    generator = torch.Generator().manual_seed(t.seed + ranks.rank)  # each rank its own batches
    state = {
        "step": 0,
        "tokens_seen": 0,
        "best_val_loss": float("inf"),
        "best_step": None,
        "wall_time_s": 0.0,
        "train_loss": None,
        "val_loss": None,
    }
    if saved is not None:
        optimizer.load_state_dict(saved["optimizer"])
        rng_states = saved.get("rank_rng", [saved["rng"]])  # by rank of the saved run
        if ranks.rank < len(rng_states):  # a rank the saved run did not have starts its own stream
            _restore_rng(rng_states[ranks.rank], generator, device)
        state.update({k: saved["record"][k] for k in state})
        if ranks.is_main:
            run.rewind_metrics(state["step"])
    tokens_per_step = global_batch(t, ranks) * model_config.block_size
    if ranks.is_main:
        _print_summary(model, corpus, device, precision.dtype, t, run, state["step"], ranks)

    last_saved = state["step"] if saved is not None else None  # the step last.pt holds

    def checkpoint(path: Path, with_state: bool) -> None:
        rng_states = ranks.gather(_rng_state(generator, device)) if with_state else None  # all ranks
        if not ranks.is_main:
            return
        # a step can ruin the weights while its own loss is finite (an infinite gradient): never save them
        if not torch.stack([p.isfinite().all() for p in model.parameters()]).all():
            stop_diverged(f"the weights are no longer finite at step {state['step']}")
        payload = {
            "format_version": FORMAT_VERSION,
            "model_config": vars(model_config),
            "model": model.state_dict(),
            "tokenizer": corpus.tokenizer.chars,
            "config": config.to_dict(),
            "record": _record(state, device, precision.dtype, t, model, ranks),
        }
        if with_state:
            payload["optimizer"] = optimizer.state_dict()  # the same on every rank
            payload["rng"] = rng_states[0]
            if ranks.distributed:
                payload["rank_rng"] = rng_states
        save_checkpoint(payload, path)

    def stop_diverged(what: str) -> NoReturn:
        kept = (
            f"{run.last} still holds step {last_saved}, to --resume from"
            if last_saved is not None
            else "no checkpoint had been saved yet"
        )
        clip = f"lower train.grad_clip (now {t.grad_clip:g})" if t.grad_clip > 0 else "set train.grad_clip"
        lr = f"lower train.learning_rate (now {t.learning_rate:g})"
        raise UserError(f"training diverged: {what}; {lr} or {clip}; {kept}")

    def stop_if_diverged(step: int) -> None:
        found = watch.check(step)
        if found:
            stop_diverged(f"the loss was {found[1]} at step {found[0]}")

    # ---------------------------------------------------------------- loop
    start_step = state["step"]
    if start_step > t.max_iters:
        raise UserError(
            f"--resume: {run.last} is at step {start_step}, past train.max_iters = {t.max_iters}; "
            f"set train.max_iters above {start_step} to train on"
        )
    watch = LossWatch(t.log_interval, device, last_checked=start_step)
    bar = tqdm(
        total=t.max_iters,
        initial=start_step,
        disable=not progress or not ranks.is_main,
        unit="step",
        dynamic_ncols=True,
    )
    with bar:  # closed however the loop ends, so that an error line starts on a line of its own
        started = time.perf_counter() - state["wall_time_s"]
        interval_start, interval_steps = time.perf_counter(), 0
        step = start_step
        stop.arm()
        while True:
            last_step = step == t.max_iters
            evaluated_already = resume and step == start_step  # the checkpoint we resumed from
            if (step % t.eval_interval == 0 or last_step) and not evaluated_already:
                stop_if_diverged(step)
                losses = estimate_loss(
                    model, eval_splits, t.eval_iters, t.seed + 1, precision.autocast, ranks
                )
                if not all(math.isfinite(v) for v in losses.values()):
                    stop_diverged(f"the evaluation at step {step} gave losses {losses}")
                state.update(
                    step=step,
                    train_loss=losses["train"],
                    val_loss=losses["val"],
                    wall_time_s=time.perf_counter() - started,
                )
                improved = losses["val"] < state["best_val_loss"]  # the same on every rank: losses are summed
                if improved:
                    state.update(best_val_loss=losses["val"], best_step=step)
                if ranks.is_main:
                    run.log(
                        {
                            "step": step,
                            "tokens": state["tokens_seen"],
                            "train_loss": losses["train"],
                            "val_loss": losses["val"],
                            "lr": lr_at(step, t),
                            "time_s": state["wall_time_s"],
                        }
                    )
                    bar.write(
                        f"step {step:>6}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}"
                        + (" (best)" if improved else "")
                    )
                if step > start_step:
                    checkpoint(run.last, with_state=True)
                    last_saved = step
                    if improved:
                        checkpoint(run.best, with_state=False)
            if last_step:
                break
            signum = _agreed_stop(stop, ranks, step, t.log_interval)
            if signum:  # Ctrl-C or SIGTERM came during the step just finished: save it and stop
                stop_if_diverged(step)
                if last_saved != step:
                    state["wall_time_s"] = time.perf_counter() - started
                    checkpoint(run.last, with_state=True)
                raise Interrupted(
                    signum, f"stopped by {signal.Signals(signum).name} at step {step}; saved {run.last}"
                )

            lr = lr_at(step, t)
            loss = train_step(step_model, optimizer, precision, train_batches, generator, t, lr, ranks)
            step += 1
            state["step"] = step
            state["tokens_seen"] += tokens_per_step
            bar.update(1)
            watch.add(step, loss)

            interval_steps += 1
            if step % t.log_interval == 0:  # .item() waits for the device: only at log intervals
                stop_if_diverged(step)
                now = time.perf_counter()
                speed = interval_steps * tokens_per_step / (now - interval_start)
                bar.set_postfix(loss=f"{loss.item():.4f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}")
                interval_start, interval_steps = now, 0
    state["wall_time_s"] = time.perf_counter() - started
    return _record(state, device, precision.dtype, t, model, ranks)


def _agreed_stop(stop: StopRequest, ranks: Ranks, step: int, every: int) -> int | None:
    """The signal to stop on at this step, the same on every rank; None to go on.

    One process stops at the end of the step in which the signal came. Several
    must stop at the same step (a checkpoint gathers from all of them), so they
    compare notes every `every` steps, one all-reduce there and no waiting on
    each other in between: they stop at the first such step after any was told to.
    """
    if not ranks.distributed:
        return stop.signum
    if step % every:
        return None
    return int(ranks.max(torch.tensor(stop.signum or 0, device=ranks.device)).item()) or None


def _check_same_model(saved: dict, model_config: GPTConfig, path: Path) -> None:
    if saved["model_config"] != vars(model_config):
        raise UserError(
            f"--resume: the config's model ({vars(model_config)}) differs from the one in "
            f"{path} ({saved['model_config']}); resume with the run's own config.yaml"
        )


def _rng_state(generator: torch.Generator, device: torch.device) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "batches": generator.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _restore_rng(state: dict[str, Any], generator: torch.Generator, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    generator.set_state(state["batches"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _record(
    state: dict[str, Any], device: torch.device, dtype: str, t: TrainSection, model: GPT, ranks: Ranks
) -> dict[str, Any]:
    return {
        **state,
        "device": str(device),
        "dtype": dtype,
        "torch_version": str(torch.__version__),
        "num_params": model.num_params(),
        "world_size": ranks.world_size,
        "global_batch": global_batch(t, ranks),
    }


def _print_summary(
    model: GPT,
    corpus: Corpus,
    device: torch.device,
    dtype: str,
    t: TrainSection,
    run: RunDirectory,
    step: int,
    ranks: Ranks,
) -> None:
    c = model.config
    print(
        f"model: {model.num_params() / 1e6:.2f}M parameters ({c.n_layer} layers, {c.n_head} heads, "
        f"{c.n_embd} wide, block {c.block_size})"
    )
    print(
        f"corpus: {corpus.path} ({len(corpus.train) + len(corpus.val):,} characters, "
        f"vocabulary {corpus.tokenizer.vocab_size})"
    )
    print(
        f"training: {t.max_iters} steps of {global_batch(t, ranks)} × {c.block_size} tokens on {device} "
        f"({dtype}{' by train.dtype auto' if t.dtype == 'auto' else ''})"
        f"{f', resuming at step {step}' if step else ''}; run directory {run.path}"
    )
    if dtype == "bfloat16" and device.type == "cpu" and not cpu_multiplies_bfloat16():
        print(
            "note: this CPU has no bfloat16 instructions (AVX-512 BF16), so bfloat16 trains several times "
            "slower than float32 here; set train.dtype to auto or float32"
        )
    if ranks.distributed:
        print(
            f"distributed: {ranks.world_size} processes ({'nccl' if device.type == 'cuda' else 'gloo'}), "
            f"global batch {global_batch(t, ranks)} = {t.batch_size} per rank × {ranks.world_size} ranks "
            f"× {t.grad_accum_steps} accumulation steps"
        )
