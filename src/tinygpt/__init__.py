"""tinygpt: a small, transparent character-level GPT you can train, sample and look inside."""

import importlib
import warnings

# torch warns at import when NumPy is absent; tinygpt never needs NumPy, so keep the terminal clean
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

from tinygpt.errors import UserError  # noqa: E402

__all__ = ["GPT", "GPTConfig", "CharTokenizer", "UserError", "load_checkpoint"]
_LAZY = {"GPT": "model", "GPTConfig": "model", "CharTokenizer": "tokenizer", "load_checkpoint": "checkpoint"}


def __getattr__(name: str):
    """Import torch-backed names on first use, so that `tinygpt train` can check a config in a blink."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"tinygpt.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'tinygpt' has no attribute {name!r}")
