"""tinygpt: a small, transparent character-level GPT you can train, sample and look inside.

From Python (a notebook, say), what the commands do:

    import tinygpt
    tinygpt.train("cpu_quick", out_dir="runs/quick")   # tinygpt train
    lm = tinygpt.load("runs/quick")                    # a TinyGPT: model, tokenizer, record
    lm.sample("ROMEO:"); lm.attention("To be"); lm.heads(); lm.walkthrough("To be", 1, 0)
    tinygpt.timeline("runs/quick")

This module is the package's front door: like `python -m tinygpt`, it stands above every
room (docs/layout.md), and it imports what it names only when it is first used.
"""

import importlib
import warnings

# torch warns at import when NumPy is absent; tinygpt never needs NumPy, so keep the terminal clean
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

from tinygpt.errors import UserError  # noqa: E402

__all__ = [
    "train",
    "load",
    "timeline",
    "attention_by_hand",
    "features",
    "generate",
    "TinyGPT",
    "GPT",
    "GPTConfig",
    "CharTokenizer",
    "UserError",
    "load_checkpoint",
]
# name -> the module that defines it, imported on first use, so that `tinygpt train` checks a config
# in a blink (tests/core/test_layout.py holds these to the rooms' rule, as if they were imports)
LAZY = {
    "train": "app.api",
    "timeline": "app.api",
    "attention_by_hand": "app.api",
    "features": "app.api",
    "load": "app.api",
    "TinyGPT": "app.api",
    "generate": "generation.sampling",
    "GPT": "model",
    "GPTConfig": "model",
    "CharTokenizer": "tokenizer",
    "load_checkpoint": "files.checkpoint",
}


def __getattr__(name: str):
    """Import torch-backed names on first use."""
    if name in LAZY:
        return getattr(importlib.import_module(f"tinygpt.{LAZY[name]}"), name)
    raise AttributeError(f"module 'tinygpt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
