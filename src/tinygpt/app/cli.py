"""The command line: `tinygpt train | sample | inspect | explain | features | export | evaluate | bench`.

The scripts in scripts/*.py are thin wrappers over `main`.

Here: the parser (each command's options) and the error policy: a UserError becomes
one line on stderr and exit code 2; anything else is a bug and shows its traceback.
What each command then does is in tinygpt.app.commands; how a failed rank of a torchrun
job ends, in tinygpt.app.job_exit; how argparse's own complaints are said, in tinygpt.app.usage.
"""

import argparse
import errno
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tinygpt.app import commands, features
from tinygpt.app.job_exit import (
    in_torchrun_job,
    leave_job_if_failed,
    said_by_this_process,
    wait_for_rank_0_to_say_it,
)
from tinygpt.app.usage import Parser, html_path, numbers
from tinygpt.config.run_config import DEVICES, shipped_configs
from tinygpt.errors import UserError
from tinygpt.training.interrupt import stopping_like_ctrl_c


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tinygpt", description="A small, transparent character-level GPT.")
    parser.add_argument("--version", action="version", version=f"tinygpt {package_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_train(subparsers)
    _add_sample(subparsers)
    _add_inspect(subparsers)
    _add_explain(subparsers)
    _add_features(subparsers)
    _add_export(subparsers)
    _add_evaluate(subparsers)
    _add_bench(subparsers)
    return parser


def package_version() -> str:
    """The installed package's version, from its metadata (pyproject.toml's, once installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tinygpt")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(version unknown: not installed; pip install -e . records it)"


def _add_prompt(p: argparse.ArgumentParser, help: str, default: str | None) -> None:
    """--prompt TEXT or --prompt-file FILE, not both."""
    given = p.add_mutually_exclusive_group()
    given.add_argument("--prompt", default=default, help=help)
    given.add_argument(
        "--prompt-file",
        metavar="FILE",
        help="read the prompt from this UTF-8 text file instead (all of it, newlines included)",
    )


def _add_ablate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ablate", metavar="L.H[,L.H...]", help="switch these heads off, e.g. --ablate 2.0,3.1")
    p.add_argument(
        "--ablate-mode",
        choices=["zero", "mean"],
        help="with --ablate: zero, a head adds nothing (default); mean, its mean output over validation text",
    )


def _config_help() -> str:
    return f"a YAML config file, or a shipped config by name: {', '.join(shipped_configs())}"


def _add_train(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="train a model from a YAML config",
        epilog="examples:\n"
        "  tinygpt train --config configs/cpu.yaml --set train.max_iters=500\n"
        "  tinygpt train --config configs/cpu.yaml --resume\n"
        "  torchrun --nproc_per_node=4 scripts/train.py --config configs/shakespeare_char.yaml\n"
        "(the last: 4 processes with DDP, one per GPU; the README shows several machines)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help=_config_help())
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value (repeatable), e.g. --set train.learning_rate=3e-4",
    )
    p.add_argument("--resume", action="store_true", help="continue the run in out_dir from its last.pt")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=commands.train_command)


def _add_sample(subparsers) -> None:
    p = subparsers.add_parser(
        "sample",
        help="generate text from a checkpoint",
        epilog='example: tinygpt sample --prompt "ROMEO:" --max-new-tokens 300',
    )
    p.add_argument("--checkpoint", help="a .pt file (default: the newest best.pt under checkpoints/)")
    _add_prompt(p, "text to continue (default: empty, starts at a new line)", default="")
    p.add_argument("--max-new-tokens", type=int, default=500, help="characters to generate (default 500)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy; higher = more varied (0.8)")
    p.add_argument("--top-k", type=int, default=None, help="sample only from the k most likely characters")
    p.add_argument("--top-p", type=float, default=None, help="sample from the smallest set with this mass")
    p.add_argument("--num-samples", type=int, default=1, help="independent samples (default 1)")
    p.add_argument("--seed", type=int, default=1337, help="random seed (default 1337)")
    p.add_argument("--device", default="auto", choices=DEVICES, help="default auto")
    threads = "CPU threads: a number, or auto (default): the fastest count, measured on the first steps"
    p.add_argument("--threads", default="auto", metavar="N|auto", help=threads)
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="recompute the whole window each step (exact sliding window, slower)",
    )
    _add_ablate(p)
    steer = "clamp feature F of layer L (tinygpt features) to VALUE; report what it does (repeatable)"
    p.add_argument("--steer", action="append", metavar="L.F=VALUE", help=steer)
    p.set_defaults(func=commands.sample_command)


def _add_inspect(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect", help="describe a checkpoint", epilog="example: tinygpt inspect checkpoints/cpu/best.pt"
    )
    p.add_argument("checkpoint", help="a .pt file written by training (with --timeline: its run directory)")
    _add_prompt(p, "also show each head's attention on this text, and the next-character odds", default=None)
    p.add_argument(
        "--layer", type=int, help="with --prompt: only this layer (default: all); with --features: its"
    )
    p.add_argument("--head", type=int, help="with --prompt: only this head (default: all)")
    p.add_argument("--lens", action="store_true", help="with --prompt: the logit lens, each layer's top 5")
    p.add_argument(
        "--heads",
        action="store_true",
        help="a table of every head's role scores and importance, and each in words",
    )
    p.add_argument(
        "--circuits",
        action="store_true",
        help="the strongest Q-, K- and V-compositions between heads (weights only)",
    )
    _add_logit_views(p)
    p.add_argument(
        "--neurons",
        action="store_true",
        help="every MLP neuron (--layer L: one layer's) by what switching it off costs, each with how "
        "often it fires, the characters it promotes and a line in words",
    )
    p.add_argument("--neuron", type=int, help="with --neurons and --layer: this neuron in detail")
    p.add_argument(
        "--json",
        action="store_true",
        help="with --heads, --attribution, --patch, --neurons or --features: as JSON",
    )
    features_help = (
        "the dictionary `tinygpt features` made: its quality, its features best-described first; with "
        "--attribution: each MLP's part split into its features"
    )
    p.add_argument("--features", action="store_true", help=features_help)
    p.add_argument("--feature", type=int, metavar="F", help="with --features: this feature in detail")
    p.add_argument("--site", choices=["mlp_out", "resid_post"], help="with --features: the hook point's site")
    p.add_argument(
        "--windows",
        type=int,
        help="with --heads: validation windows scored (default 16, or as many as the split holds)",
    )
    p.add_argument(
        "--timeline",
        action="store_true",
        help="each head's role at every evaluation of the run (timeline.jsonl)",
    )
    p.add_argument(
        "--from-checkpoints",
        action="store_true",
        help="with --timeline: first write timeline.jsonl from the checkpoints of a run that recorded none",
    )
    _add_ablate(p)
    p.set_defaults(func=commands.inspect_command)


def _add_logit_views(p: argparse.ArgumentParser) -> None:
    """inspect's --attribution (which part wrote a logit) and --patch (activation patching), and theirs."""
    p.add_argument(
        "--attribution",
        action="store_true",
        help="with --prompt: split a logit into what each head, MLP and embedding wrote (bars)",
    )
    p.add_argument(
        "--position",
        type=int,
        help="with --attribution: the position whose next character is scored, from 0 or negative from the "
        "end (default -1, the last)",
    )
    p.add_argument("--target", help="with --attribution: the character (default: the one the model predicts)")
    p.add_argument(
        "--versus", help="with --attribution or --patch: score the target's (answer's) logit minus this one's"
    )
    p.add_argument(
        "--patch",
        action="store_true",
        help="patch each head and stream position from --clean into --corrupted, scored 0 to 1",
    )
    p.add_argument("--clean", help="with --patch: the prompt whose answer is restored")
    p.add_argument("--corrupted", help="with --patch: the same length, changed where it matters")
    p.add_argument("--answer", help="with --patch: the clean answer (default: the clean run's prediction)")


def _add_explain(subparsers) -> None:
    p = subparsers.add_parser(
        "explain",
        help="walk one character through one attention head, every number printed; or write an HTML page",
        epilog='example: tinygpt explain checkpoints/cpu/best.pt --prompt "ROMEO:" --layer 2 --head 0 '
        "--token 3   |   tinygpt explain --q 1,0.5 --keys 1,0 0.5,1 1.5,1 --values 0.5,1 1,0 1.5,1",
    )
    p.add_argument(
        "checkpoint",
        nargs="?",
        help="a .pt file, or a run directory for its best.pt (default: the newest best.pt under checkpoints)",
    )
    _add_prompt(p, "text to run through the model (default: a newline)", default="")
    p.add_argument("--layer", type=int, default=0, help="attention layer to follow (default 0)")
    p.add_argument("--head", type=int, default=0, help="head of that layer (default 0)")
    p.add_argument(
        "--token", type=int, help="position in the prompt to follow, from 0 (or -1: the last, the default)"
    )
    p.add_argument("--dims", type=int, help="entries of each vector to print (default: d_head)")
    p.add_argument(
        "--backward",
        action="store_true",
        help="continue backwards: the gradients of the loss of predicting the character after --token",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=0.1,
        help="with --backward or --html: the size of the gradient step that step 7 shows (default 0.1)",
    )
    _add_ablate(p)
    p.add_argument(
        "--html",
        nargs="?",
        const="",
        type=html_path,
        metavar="OUT.html",
        help="write the interactive explainer page instead: to OUT.html, or alone to explain.html "
        "in the checkpoint's run directory",
    )
    p.add_argument("--q", type=numbers, metavar="Q", help="by hand, without a model: a query, e.g. 1,0.5")
    p.add_argument("--keys", type=numbers, nargs="+", metavar="K", help="by hand: keys, e.g. 1,0 0.5,1")
    p.add_argument("--values", type=numbers, nargs="+", metavar="V", help="by hand: one value per key")
    p.set_defaults(func=commands.explain_command)


def _add_features(subparsers) -> None:
    help = "train a sparse dictionary of one layer's activations; score it and describe every feature"
    example = (
        "example: tinygpt features checkpoints/cpu --layer 1; tinygpt inspect checkpoints/cpu --features"
    )
    p = subparsers.add_parser("features", help=help, epilog=example)
    p.add_argument(
        "run", help="a run directory (its best.pt) or a .pt file; writes RUN/features/SITE.LAYER.pt"
    )
    p.add_argument("--layer", type=features.layer_option, help="a layer, or all (default 1)")
    p.add_argument("--site", choices=["mlp_out", "resid_post"], default="mlp_out", help="default mlp_out")
    p.add_argument("--size", type=int, help="latents (default 8 × the model's width)")
    p.add_argument("--k", type=int, default=16, help="latents kept per position (default 16)")
    p.add_argument("--seed", type=int, default=0, help="the dictionary's seed and its windows' (default 0)")
    p.add_argument("--positions", type=int, default=600_000, help="positions trained on (default 600,000)")
    p.add_argument("--device", default="auto", choices=DEVICES, help="default auto")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=features.features_command)


def _add_export(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a checkpoint for Hugging Face transformers, TransformerLens, or as bare safetensors",
        description="Write a checkpoint's model into a new directory: --format hf for "
        "transformers (GPT2LMHeadModel + a character tokenizer), --format transformer-lens for "
        "the same directory checked in TransformerLens (TransformerBridge.boot_transformers loads it), "
        "--format safetensors for the bare weights with a JSON config, --format sae-lens for the run's "
        "feature dictionary (tinygpt features) as a SAELens TopK SAE. Needs the hf extra "
        "(pip install 'tinygpt[hf]'), and the lens extra for transformer-lens.",
        epilog="example: tinygpt export checkpoints/cpu/best.pt --format hf exports/cpu",
    )
    p.add_argument("checkpoint", help="a .pt file written by training")
    p.add_argument("out_dir", help="the directory to write (must not exist, or be empty)")
    p.add_argument(
        "--format",
        choices=["hf", "safetensors", "transformer-lens", "sae-lens"],
        default="hf",
        help="hf: a transformers GPT-2 directory; transformer-lens: the same, checked in TransformerLens; "
        "safetensors: bare weights + JSON; sae-lens: the run's feature dictionary (default hf)",
    )
    p.add_argument("--layer", type=int, help="with --format sae-lens: the dictionary's layer")
    p.add_argument("--site", choices=["mlp_out", "resid_post"], help="with --format sae-lens: its site")
    p.set_defaults(func=commands.export_command)


def _add_evaluate(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="a checkpoint's loss on a whole split of a corpus, every character predicted once",
        description="The mean cross-entropy (nats per character) of a checkpoint on a corpus's "
        "validation (or training) split, cut into consecutive block_size windows so that every "
        "character after the first is predicted exactly once. The corpus and val_fraction are "
        "the run's own, from the config inside the checkpoint, unless --corpus names another.",
        epilog="example: tinygpt evaluate checkpoints/cpu/best.pt --corpus data/tinyshakespeare.txt",
    )
    p.add_argument("checkpoint", help="a .pt file written by training")
    p.add_argument("--corpus", metavar="FILE", help="a UTF-8 text file (default: the run's own corpus)")
    p.add_argument("--split", choices=["val", "train"], default="val", help="which split (default val)")
    p.add_argument("--batch-size", type=int, default=64, help="windows per forward pass (default 64)")
    p.add_argument("--device", default="auto", choices=DEVICES, help="default auto")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=commands.evaluate_command)


def _add_bench(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="measure training and generation speed, memory and MFU for a config",
        epilog="example: tinygpt bench --config configs/cpu.yaml --json",
    )
    p.add_argument("--config", required=True, help=_config_help())
    p.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value"
    )
    p.add_argument("--steps", type=int, default=30, help="timed training steps (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed training steps first (default 5)")
    p.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[100, 500, 2000],
        help="new tokens per generation run (default 100 500 2000)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=commands.bench_command)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, which knows its options
        commands_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands_action.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return run(args.func, args)


@contextmanager
def name_too_long_is_a_user_error() -> Iterator[None]:
    """A path the user gave with a name longer than the file system takes (ENAMETOOLONG) can fail
    wherever the path is first touched; it is the user's to shorten, said in one line."""
    try:
        yield
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG or not isinstance(e.filename, (str, bytes)):
            raise
        raise UserError(
            f"{os.fsdecode(e.filename)} cannot be used: a name in it is longer than the file system allows "
            f"({e.strerror}); give a path whose every name is at most 255 bytes"
        ) from None


def run(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    try:
        with stopping_like_ctrl_c(), name_too_long_is_a_user_error():  # SIGTERM too: no half-written file
            if getattr(args, "prompt_file", None) is not None:
                args.prompt = commands.read_prompt_file(args.prompt_file)
            return func(args) or 0
    except UserError as e:
        if said_by_this_process(e):
            print(f"error: {e}", file=sys.stderr)
        else:
            wait_for_rank_0_to_say_it()
        return leave_job_if_failed(2)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM or SIGHUP as Interrupted: half-written files gone
        print(f"\n{str(e) or 'stopped by SIGINT'}", file=sys.stderr)  # a bare KeyboardInterrupt: Ctrl-C
        return getattr(e, "exit_code", 130)
    except BrokenPipeError:  # the reader went away (`… | head`): stop quietly, as other Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141  # 128 + SIGPIPE: what a shell reports for a tool stopped by a closed pipe
    except Exception:  # a bug: its traceback, and under torchrun the rank leaves at once
        if not in_torchrun_job():
            raise
        traceback.print_exc()
        return leave_job_if_failed(1)


if __name__ == "__main__":
    sys.exit(main())
