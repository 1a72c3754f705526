"""What each command does once its options are parsed: one function per command, each
calling into the package (imported when the command runs, so that a typo in a config is
reported before torch is loaded). The parser is in tinygpt.app.cli.
"""

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

from tinygpt.app.job_exit import leave_job_if_failed
from tinygpt.errors import UserError, shown


def train_command(args: argparse.Namespace) -> int:
    from tinygpt.config.run_config import load_config

    config = load_config(args.config, args.set)  # before torch is imported: a typo is reported at once
    if args.resume:
        from tinygpt.training.resume import run_of_own_config

        config.out_dir = run_of_own_config(args.config, config.out_dir, args.set)
    from tinygpt.app.api import train
    from tinygpt.training.distributed import is_main_process
    from tinygpt.training.interrupt import Interrupted
    from tinygpt.training.resume import resume_line

    try:
        record = train(config, resume=args.resume, progress=not args.quiet)
    except Interrupted as e:
        if is_main_process():
            print(shown(e), file=sys.stderr)
            if (Path(config.out_dir) / "last.pt").is_file():
                print(f"to resume: {shown(resume_line(config.out_dir))}", file=sys.stderr)
        return leave_job_if_failed(e.exit_code)  # under torchrun, the rank ends here (see there why)
    if is_main_process():  # under torchrun, once for the job
        print(
            f"done: step {record['step']}, best val loss {record['best_val_loss']:.4f}; "
            f"checkpoints in {shown(config.out_dir)}"
        )
    return 0


def sample_command(args: argparse.Namespace) -> None:
    sample(
        args.checkpoint,
        args.prompt,
        args.max_new_tokens,
        args.temperature,
        args.top_k,
        args.top_p,
        args.num_samples,
        args.seed,
        args.device,
        use_cache=not args.no_cache,
        ablate=args.ablate,
        ablate_mode=ablate_mode(args),
        steer=args.steer,
        threads=args.threads,
    )


def sample(
    checkpoint: str | Path | None = None,
    prompt: str = "",
    max_new_tokens: int = 500,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    num_samples: int = 1,
    seed: int = 1337,
    device: str = "auto",
    use_cache: bool = True,
    out: TextIO | None = None,
    ablate: str | None = None,
    ablate_mode: str = "zero",
    steer: list[str] | None = None,
    threads: int | str = "auto",
) -> list[str]:
    """`tinygpt sample`: print num_samples continuations of prompt, character by character; return them.

    ablate: heads to switch off, as LAYER.HEAD[,…] (see tinygpt.explain.ablate), in ablate_mode.
    steer: features to clamp, as LAYER.FEATURE=VALUE each; the measured effect goes to stderr first.
    threads: torch's CPU threads, a count or auto (tinygpt.threads).
    """
    from tinygpt.app.api import load
    from tinygpt.app.sample import Sampling
    from tinygpt.device import pick_device
    from tinygpt.threads import threads_value

    Sampling(max_new_tokens, temperature, top_k, top_p, num_samples, seed)  # checked before loading
    threads = threads_value(threads, "--threads")
    if temperature == 0 and num_samples > 1:  # printed all the same, as asked, with why they agree
        print(
            f"note: --temperature 0 picks the likeliest character each time, so the {num_samples} samples "
            "are the same text; use a temperature above 0 (e.g. 0.8) for different ones",
            file=sys.stderr,
        )
    lm = load(checkpoint, pick_device(device))
    with lm.ablate(ablate, ablate_mode) if ablate else nullcontext():
        if steer:
            print(lm.steering(prompt, steer), file=sys.stderr)  # before sampling: a mistake stops it
        return lm.sample(
            prompt, max_new_tokens, temperature, top_k, top_p, num_samples, seed,
            stream=out or sys.stdout, use_cache=use_cache,  # stdout looked up now: a redirected one counts
            steer=steer, threads=threads,
        )  # fmt: skip


def ablate_mode(args: argparse.Namespace) -> str:
    """--ablate-mode, which says how --ablate switches heads off: refused without --ablate."""
    if args.ablate_mode and not args.ablate:
        mode = args.ablate_mode
        raise UserError(f"--ablate-mode {mode} says how --ablate switches heads off; add --ablate")
    return args.ablate_mode or "zero"


def inspect_command(args: argparse.Namespace) -> None:
    from tinygpt.explain.report import describe

    if logit_view_options(args):  # --attribution or --patch: a view of its own
        print(logit_view(args))
        return
    if neurons_options(args):
        print(neurons_view(args))
        return
    if args.features or args.feature is not None or args.site:
        return inspect_features_command(args)
    if args.prompt is None and (args.layer is not None or args.head is not None):
        raise UserError("--layer and --head choose which heatmaps --prompt shows; add --prompt")
    if args.prompt is None and (args.lens or args.ablate):
        raise UserError("--lens and --ablate change what --prompt shows; add --prompt")
    ablate_mode(args)  # refused without --ablate, before any work
    if args.json and not args.heads:
        raise UserError(
            "--json prints --heads, --attribution, --patch, --neurons or --features as JSON; add one of them"
        )
    if args.from_checkpoints and not args.timeline:
        raise UserError(
            "--from-checkpoints writes the --timeline of a run that recorded none; add --timeline"
        )
    if args.timeline:
        if args.heads or args.circuits or args.prompt is not None:
            raise UserError(
                "--timeline is a view of its own: drop --heads, --circuits and --prompt, or --timeline"
            )
        from tinygpt.app.api import timeline

        view = timeline(args.checkpoint, from_saved_checkpoints=args.from_checkpoints)
        if args.from_checkpoints:
            from tinygpt.explain.timeline import FILE_NAME, run_directory

            written = run_directory(args.checkpoint) / FILE_NAME
            print(
                f"wrote {shown(written)}: {len(view.snapshots)} snapshot{'s' * (len(view.snapshots) != 1)} "
                "from its checkpoints",
                file=sys.stderr,
            )
        print(view)
        return
    from tinygpt.app.api import load

    if args.circuits:
        if args.heads or args.prompt is not None:
            raise UserError("--circuits is a view of its own: drop --heads and --prompt, or --circuits")
        print(load(args.checkpoint).circuits())
        return
    if args.heads:
        from tinygpt.explain.heads import heads_json

        heads = load(args.checkpoint).heads(args.windows)
        print(heads_json(heads.heads) if args.json else heads)
        return
    report = describe(args.checkpoint)  # both built before either is printed: a mistake prints nothing
    if args.prompt is not None:
        report += "\n\n" + prompt_views(load(args.checkpoint), args)
    print(report)


def inspect_features_command(args: argparse.Namespace) -> None:
    """`inspect RUN --features [--layer L] [--site S] [--feature F] [--json]`, a view of its own."""
    if not args.features:
        raise UserError("--feature and --site choose what --features shows; add --features")
    others = [
        args.heads,
        args.circuits,
        args.timeline,
        args.prompt is not None,
        args.head is not None,
        args.ablate,
    ]
    if any(others):
        raise UserError(
            "--features is a view of its own: drop --heads, --circuits, --timeline, --prompt, --head and "
            "--ablate, or --features"
        )
    from tinygpt.app.api import load
    from tinygpt.app.features import inspect_features, run_checkpoint

    inspect_features(load(run_checkpoint(args.checkpoint)), args)


def prompt_views(lm, args: argparse.Namespace) -> str:
    """What `inspect --prompt` adds: the chosen heads' heatmaps and the next-character table; with --lens,
    the logit lens; with --ablate, all of it with those heads switched off."""
    with lm.ablate(args.ablate, ablate_mode(args)) if args.ablate else nullcontext():
        views = [lm.attention(args.prompt, args.layer, args.head)]
        if args.lens:
            views.append(lm.lens(args.prompt))
    text = "\n\n".join(map(repr, views))
    return f"with heads {args.ablate} switched off ({ablate_mode(args)}):\n\n{text}" if args.ablate else text


def logit_view_options(args: argparse.Namespace) -> bool:
    """Whether --attribution or --patch is asked for, their options checked; an option of theirs given
    without them is refused."""
    for view, options in (
        ("--attribution", ("position", "target")),
        ("--patch", ("clean", "corrupted", "answer")),
    ):
        given = [f"--{o}" for o in options if getattr(args, o) is not None]
        if given and not getattr(args, view[2:]):
            raise UserError(
                f"{' and '.join(given)} go{'es' if len(given) == 1 else ''} with {view}; add {view}"
            )
    if args.versus is not None and not (args.attribution or args.patch):
        raise UserError("--versus goes with --attribution or --patch; add one of them")
    if not (args.attribution or args.patch):
        return False
    if args.feature is not None or args.site or (args.features and args.patch):
        raise UserError(
            "--features goes with --attribution (each MLP split by its mlp_out dictionary); drop --feature "
            "and --site, and --features from --patch"
        )
    others = [
        o
        for o in ("attribution", "patch", "heads", "circuits", "timeline", "lens", "neurons")
        if getattr(args, o)
    ]
    if len(others) > 1 or args.layer is not None or args.head is not None:
        raise UserError(
            f"--{others[0]} is a view of its own: drop --{', --'.join(others[1:]) or 'layer and --head'}"
        )
    if args.attribution and args.prompt is None:
        raise UserError("--attribution splits the logit at a position of --prompt; add --prompt")
    if args.patch and (args.clean is None or args.corrupted is None or args.prompt is not None):
        raise UserError("--patch takes its two prompts as --clean and --corrupted (not --prompt); give both")
    return True


def logit_view(args: argparse.Namespace) -> str:
    """`inspect --attribution` (the parts that wrote a logit) or `inspect --patch` (patching), as text or
    JSON; with --ablate, with those heads switched off."""
    from tinygpt.app.api import load
    from tinygpt.explain.attribution import parts_json
    from tinygpt.explain.patching import patching_json

    mode = ablate_mode(args)
    lm = load(args.checkpoint)
    with lm.ablate(args.ablate, mode) if args.ablate else nullcontext():
        if args.attribution:
            position = -1 if args.position is None else args.position
            view = lm.attribution(args.prompt, position, args.target, args.versus, args.features)
            text = parts_json(view.found) if args.json else repr(view)
        else:
            view = lm.patch(args.clean, args.corrupted, args.answer, args.versus)
            text = patching_json(view.found) if args.json else repr(view)
    return (
        f"with heads {args.ablate} switched off ({mode}):\n\n{text}"
        if args.ablate and not args.json
        else text
    )


def neurons_options(args: argparse.Namespace) -> bool:
    """Whether --neurons is asked for, its options checked: --neuron without it is refused, and it is a
    view of its own."""
    if args.neuron is not None and not args.neurons:
        raise UserError(f"--neuron {args.neuron} picks a neuron for --neurons to show; add --neurons")
    if not args.neurons:
        return False
    others = [o for o in ("heads", "circuits", "timeline", "lens", "from_checkpoints") if getattr(args, o)]
    others += [
        o for o in ("prompt", "head", "windows", "ablate", "ablate_mode") if getattr(args, o) is not None
    ]
    if others:
        dropped = ", --".join(o.replace("_", "-") for o in others)
        raise UserError(f"--neurons is a view of its own (with --layer, --neuron, --json): drop --{dropped}")
    if args.neuron is not None and args.layer is None:
        raise UserError(f"--neuron {args.neuron} is a neuron of one layer; add --layer")
    return True


def neurons_view(args: argparse.Namespace) -> str:
    """`inspect --neurons`: a layer's (or every layer's) neurons by cost, or one in detail; text or JSON."""
    from tinygpt.app.api import load
    from tinygpt.explain.neurons import neurons_json
    from tinygpt.explain.views import NeuronDetail

    view = load(args.checkpoint).neurons(args.layer, args.neuron, progress=sys.stderr.isatty())
    if not args.json:
        return repr(view)
    return neurons_json(view.found, view.neuron if isinstance(view, NeuronDetail) else None)


def explain_command(args: argparse.Namespace) -> None:
    by_hand = [args.q, args.keys, args.values]
    if any(x is not None for x in by_hand):
        if any(x is None for x in by_hand):
            raise UserError("--q, --keys and --values go together: give all three")
        from tinygpt.app.api import attention_by_hand

        print(attention_by_hand(args.q, args.keys, args.values))
        return
    from tinygpt.files.checkpoint import chosen_checkpoint

    checkpoint = chosen_checkpoint(args.checkpoint)
    if checkpoint.is_dir():  # a run directory: its best checkpoint
        checkpoint = checkpoint / "best.pt"
    if args.html is not None:
        if args.ablate or args.ablate_mode or args.backward:
            raise UserError(
                "--ablate, --ablate-mode and --backward are for the walkthrough in the terminal, not the "
                "page: in the page, click a head's label to switch it off (zero or mean, a switch above "
                "the heads), and 'Show the backward pass'"
            )
        from tinygpt.explain.page import write_page

        where = args.html or None
        page = write_page(
            checkpoint,
            args.prompt,
            where,
            args.layer,
            args.head,
            args.token,
            progress=sys.stderr.isatty(),  # a bar only where someone watches; not into a log file
            lr=args.lr,
        )
        print(shown(page))
        return
    from tinygpt.app.api import load

    mode = ablate_mode(args)  # refused without --ablate, before any work
    lm = load(checkpoint)
    with lm.ablate(args.ablate, mode) if args.ablate else nullcontext():
        if args.backward:
            print(lm.backward(args.prompt, args.layer, args.head, args.token, args.dims, args.lr))
        else:
            print(lm.walkthrough(args.prompt, args.layer, args.head, args.token, args.dims))


def read_prompt_file(path: str) -> str:
    """--prompt-file's text: the whole file, read as UTF-8 (a byte-order mark dropped, line ends as \\n)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except FileNotFoundError:
        raise UserError(
            f"--prompt-file {path} does not exist; pass a UTF-8 text file holding the prompt"
        ) from None
    except IsADirectoryError:
        raise UserError(f"--prompt-file {path} is a directory; pass a text file holding the prompt") from None
    except PermissionError:
        raise UserError(f"--prompt-file {path} cannot be read (permission denied)") from None
    except UnicodeDecodeError as e:
        raise UserError(
            f"--prompt-file {path} is not UTF-8 text (bad byte at offset {e.start}); convert it to UTF-8"
        ) from None
    except OSError as e:  # a loop of links, a path through a file, a name too long, …
        raise UserError(
            f"--prompt-file {path} cannot be read ({e.strerror}); pass a UTF-8 text file holding the prompt"
        ) from None


def export_command(args: argparse.Namespace) -> None:
    from tinygpt.app.export import export

    print(shown(export(args.checkpoint, args.out_dir, args.format, args.layer, args.site)))


def evaluate_command(args: argparse.Namespace) -> None:
    from tinygpt.app.evaluate import evaluate_checkpoint

    result = evaluate_checkpoint(
        args.checkpoint, args.corpus, args.split, args.batch_size, args.device, progress=not args.quiet
    )
    print(shown(result.summary()))


def bench_command(args: argparse.Namespace) -> None:
    import json

    from tinygpt.app.bench import benchmark, format_report
    from tinygpt.config.run_config import load_config

    _check_bench_counts(args.steps, args.warmup, args.lengths)
    config = load_config(args.config, args.set)
    result = benchmark(config, args.steps, args.warmup, args.lengths, progress=not args.quiet)
    print(json.dumps(result, indent=2) if args.json else format_report(result))


BENCH_MOST = {
    "--steps": 100_000,
    "--warmup": 100_000,
    "--lengths": 1_000_000,
}  # hours of cpu.yaml, not a typo's years


def _check_bench_counts(steps: int, warmup: int, lengths: list[int]) -> None:
    """`bench`'s counts in range, or one UserError: it gives no result until every run has finished."""
    if steps < 1 or warmup < 0 or any(n < 1 for n in lengths):
        raise UserError("--steps and every --lengths value must be at least 1, --warmup at least 0")
    for option, value in (("--steps", steps), ("--warmup", warmup), ("--lengths", max(lengths))):
        if value > BENCH_MOST[option]:
            raise UserError(
                f"{option} {value:,} is more than a benchmark needs (it reports medians, settled within tens "
                f"of steps, and gives no result until it ends); use at most {BENCH_MOST[option]:,}"
            )
