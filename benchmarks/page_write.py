"""How long writing the explainer page takes, for a model of configs/cpu.yaml's size.

The weights are untrained (the time does not depend on their values); the checkpoint
says which corpus it came from, so the page's head roles are scored too. Prints one
JSON object: the model's size, the page's size, the seconds write_page took and, timed
again on its own, its share for step 7 of the backward panel (a gradient step for every
head and position of the prompt).

    python benchmarks/page_write.py [--prompt TEXT] [--out FILE.json]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from tinygpt.config.run_config import load_config
from tinygpt.data.corpus import load_corpus
from tinygpt.explain.backward import STEP_LR
from tinygpt.explain.page import step_data, write_page
from tinygpt.files.checkpoint import build_checkpoint, load_checkpoint, save_checkpoint
from tinygpt.model import GPT, GPTConfig

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "cpu.yaml"


def untrained_checkpoint(directory: Path) -> Path:
    """cpu.yaml's model with its initial weights, saved with the config that names its corpus."""
    cfg = load_config(CONFIG)
    corpus = load_corpus(cfg.data, cfg.model.block_size)
    model_cfg = GPTConfig(**{**vars(cfg.model), "vocab_size": corpus.tokenizer.vocab_size})
    torch.manual_seed(0)
    model = GPT(model_cfg)
    path = directory / "best.pt"
    save_checkpoint(build_checkpoint(model, corpus.tokenizer, cfg.to_dict(), record={}), path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt", default="To be, or not to be")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = untrained_checkpoint(Path(tmp))
        start = time.perf_counter()
        write_page(checkpoint, args.prompt, Path(tmp) / "page.html")
        seconds = time.perf_counter() - start
        size = (Path(tmp) / "page.html").stat().st_size
        model, tokenizer, _ = load_checkpoint(checkpoint)
        start = time.perf_counter()
        step_data(model, tokenizer.encode(args.prompt), STEP_LR)
        step_seconds = time.perf_counter() - start
    result = {
        "config": "configs/cpu.yaml (untrained)",
        "prompt_chars": len(args.prompt),
        "page_bytes": size,
        "write_page_seconds": round(seconds, 2),
        "step_7_seconds": round(step_seconds, 2),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
