"""tinygpt: a small, transparent character-level GPT you can train, sample and look inside."""

from tinygpt.checkpoint import load_checkpoint
from tinygpt.errors import UserError
from tinygpt.model import GPT, GPTConfig
from tinygpt.tokenizer import CharTokenizer

__all__ = ["GPT", "GPTConfig", "CharTokenizer", "UserError", "load_checkpoint"]
