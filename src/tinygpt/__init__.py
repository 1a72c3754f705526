"""tinygpt: a small, transparent character-level GPT you can train, sample and look inside."""

import warnings

# torch warns at import when NumPy is absent; tinygpt never needs NumPy, so keep the terminal clean
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

from tinygpt.checkpoint import load_checkpoint  # noqa: E402
from tinygpt.errors import UserError  # noqa: E402
from tinygpt.model import GPT, GPTConfig  # noqa: E402
from tinygpt.tokenizer import CharTokenizer  # noqa: E402

__all__ = ["GPT", "GPTConfig", "CharTokenizer", "UserError", "load_checkpoint"]
