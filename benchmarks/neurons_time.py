"""How long `inspect --neurons` takes for every neuron of a cpu.yaml-shaped model: the first time
(measured) and the next (read from the cache beside the checkpoint).

    OMP_NUM_THREADS=1 python benchmarks/neurons_time.py --corpus ../shared/data/tinyshakespeare.txt

A model of cpu.yaml's shape (4 layers, 2 heads, 128 wide, block 64, no biases) with random weights,
saved as a checkpoint beside the corpus in a temporary folder: the time depends on the shape and the
validation text, not on training. Each time is the whole call, from reading the checkpoint and the
validation split to every neuron described, on one thread.
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # runs from a plain checkout too

import tinygpt
from tinygpt.files.checkpoint import build_checkpoint, save_checkpoint
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="a UTF-8 text file (tiny Shakespeare: vocabulary 65)")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus.txt"
        shutil.copy(args.corpus, corpus)
        chars = sorted(set(corpus.read_text(encoding="utf-8")))
        torch.manual_seed(0)
        config = GPTConfig(vocab_size=len(chars), block_size=64, n_layer=4, n_head=2, n_embd=128, bias=False)
        run = {"data": {"corpus": str(corpus), "val_fraction": 0.1, "data_dir": folder}}
        path = Path(folder) / "run" / "best.pt"
        path.parent.mkdir()
        save_checkpoint(build_checkpoint(GPT(config), CharTokenizer(chars), run, {"step": 0}), path)
        tinygpt.load(path).loss(1)  # the corpus's id cache built first: not the neurons' time
        times = {}
        for attempt in ("first", "cached"):
            start = time.perf_counter()
            found = tinygpt.load(path).neurons().found
            times[attempt] = round(time.perf_counter() - start, 2)
    result = {
        "neurons": len(found.neurons),
        "positions": found.positions,
        "vocabulary": len(chars),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "seconds": times,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
