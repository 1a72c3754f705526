"""The loss of a checkpoint on the whole validation split of its corpus (or another).

    python benchmarks/val_loss.py checkpoints/cpu/best.pt [--corpus data/tinyshakespeare.txt]

The split is the last `val_fraction` of the corpus the run trained on (from the
checkpoint's config), scored with `tinygpt.app.evaluate.split_loss` in float32.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

from tinygpt.app.evaluate import split_loss
from tinygpt.config.run_config import from_dict
from tinygpt.data.corpus import load_corpus
from tinygpt.device import pick_device
from tinygpt.files.checkpoint import load_checkpoint, read_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint")
    parser.add_argument("--corpus", help="score this corpus's validation split instead of the run's")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = pick_device(args.device)
    model, tokenizer, record = load_checkpoint(args.checkpoint, device=device)
    config = from_dict(read_checkpoint(args.checkpoint).config)
    if args.corpus:
        config.data.corpus = args.corpus
    corpus = load_corpus(config.data, model.config.block_size)
    if corpus.tokenizer.chars != tokenizer.chars:
        sys.exit(f"error: {corpus.path} has a different vocabulary from the checkpoint's")
    loss = split_loss(model, corpus.val, batch_size=64)
    print(
        f"{args.checkpoint} (step {record['step']}): loss {loss:.4f} on the whole validation split "
        f"of {corpus.path} ({len(corpus.val):,} characters)"
    )


if __name__ == "__main__":
    main()
