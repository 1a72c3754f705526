"""The command line: `tinygpt train | sample | inspect | export`, also behind scripts/*.py.

Each command parses its options and calls one function of the package. A
UserError becomes one line on stderr and exit code 2; anything else is a bug
and shows its traceback.
"""

import argparse
import sys
from collections.abc import Callable

from tinygpt.errors import UserError


def _train(args: argparse.Namespace) -> None:
    from tinygpt.config import load_config
    from tinygpt.distributed import is_main_process
    from tinygpt.train import train

    config = load_config(args.config, args.set)
    record = train(config, resume=args.resume, progress=not args.quiet)
    if is_main_process():  # under torchrun, once for the job
        print(
            f"done: step {record['step']}, best val loss {record['best_val_loss']:.4f}; "
            f"checkpoints in {config.out_dir}"
        )


def _sample(args: argparse.Namespace) -> None:
    from tinygpt.sample import sample

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
    )


def _inspect(args: argparse.Namespace) -> None:
    from tinygpt.report import describe

    print(describe(args.checkpoint))


def _export(args: argparse.Namespace) -> None:
    from tinygpt.export import export

    print(export(args.checkpoint, args.out_dir, args.format))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tinygpt", description="A small, transparent character-level GPT.")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser(
        "train",
        help="train a model from a YAML config",
        epilog="examples:\n"
        "  tinygpt train --config configs/cpu.yaml --set train.max_iters=500\n"
        "  tinygpt train --config configs/cpu.yaml --resume\n"
        "  torchrun --nproc_per_node=4 scripts/train.py --config configs/shakespeare_char.yaml\n"
        "(the last: 4 processes with DDP, one per GPU; the README shows several machines)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="YAML config file, e.g. configs/cpu.yaml")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value (repeatable), e.g. --set train.learning_rate=3e-4",
    )
    p.add_argument("--resume", action="store_true", help="continue the run in out_dir from its last.pt")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_train)

    p = commands.add_parser(
        "sample",
        help="generate text from a checkpoint",
        epilog='example: tinygpt sample --prompt "ROMEO:" --max-new-tokens 300',
    )
    p.add_argument("--checkpoint", help="a .pt file (default: the newest best.pt under checkpoints/)")
    p.add_argument("--prompt", default="", help="text to continue (default: empty, starts at a new line)")
    p.add_argument("--max-new-tokens", type=int, default=500, help="characters to generate (default 500)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy; higher = more varied (0.8)")
    p.add_argument("--top-k", type=int, default=None, help="sample only from the k most likely characters")
    p.add_argument("--top-p", type=float, default=None, help="sample from the smallest set with this mass")
    p.add_argument("--num-samples", type=int, default=1, help="independent samples (default 1)")
    p.add_argument("--seed", type=int, default=1337, help="random seed (default 1337)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"], help="default auto")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="recompute the whole window each step (exact sliding window, slower)",
    )
    p.set_defaults(func=_sample)

    p = commands.add_parser(
        "inspect", help="describe a checkpoint", epilog="example: tinygpt inspect checkpoints/cpu/best.pt"
    )
    p.add_argument("checkpoint", help="a .pt file written by training")
    p.set_defaults(func=_inspect)

    p = commands.add_parser(
        "export",
        help="write a checkpoint for Hugging Face transformers or as bare safetensors",
        description="Write a checkpoint's model into a new directory: --format hf for "
        "transformers (GPT2LMHeadModel + a character tokenizer), --format safetensors for "
        "the bare weights with a JSON config. Needs the hf extra: pip install 'tinygpt[hf]'.",
        epilog="example: tinygpt export checkpoints/cpu/best.pt --format hf exports/cpu",
    )
    p.add_argument("checkpoint", help="a .pt file written by training")
    p.add_argument("out_dir", help="the directory to write (must not exist, or be empty)")
    p.add_argument(
        "--format",
        choices=["hf", "safetensors"],
        default="hf",
        help="hf: a transformers GPT-2 directory; safetensors: bare weights + JSON (default hf)",
    )
    p.set_defaults(func=_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args.func, args)


def run(func: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
    try:
        func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
