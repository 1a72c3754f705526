"""Characters to ids and back, and the ids a prompt starts from."""

import sys

from tinygpt.errors import UserError


class CharTokenizer:
    """One id per character: the vocabulary is the sorted set of characters of a corpus.

    Any Unicode character can be in the vocabulary. The characters, in order, are
    all a checkpoint needs to rebuild the tokenizer.
    """

    def __init__(self, chars: list[str] | str):
        chars = list(chars)
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("a vocabulary is a list of distinct single characters")
        self.chars = chars
        self.ids = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def unknown(self, text: str) -> list[str]:
        """The distinct characters of text that are not in the vocabulary, in order of appearance."""
        return list(dict.fromkeys(c for c in text if c not in self.ids))

    def encode(self, text: str) -> list[int]:
        missing = self.unknown(text)
        if missing:
            shown = ", ".join(repr(c) for c in missing[:20]) + (" …" if len(missing) > 20 else "")
            raise UserError(
                f"{len(missing)} character(s) not in the model's vocabulary: {shown}; "
                "use only characters that occur in the training corpus"
            )
        return [self.ids[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)


EMPTY_PROMPT_START = "\n"  # what an empty prompt starts from: the character that ends every line


NEWLINE_HINT = (
    "a \\n typed in a prompt is a backslash and an n, not a newline: in bash write "
    "--prompt $'ROMEO:\\nJULIET:', or put the text in a file and pass --prompt-file FILE"
)


def prompt_ids(tokenizer: CharTokenizer, prompt: str, block_size: int | None = None) -> list[int]:
    """The prompt's ids, as every command reads a prompt.

    An empty prompt starts from a newline, as if at the start of a line. With block_size,
    a longer prompt is cropped to its last block_size characters (the model reads no more,
    as generation crops its context), and a line on stderr says so.
    """
    if not prompt:
        if EMPTY_PROMPT_START not in tokenizer.ids:
            raise UserError(
                "the prompt is empty and this model's vocabulary has no newline to start "
                "from; give a prompt with --prompt"
            )
        prompt = EMPTY_PROMPT_START
    undecodable = sorted({ord(c) - 0xDC00 for c in prompt if "\udc80" <= c <= "\udcff"})
    if undecodable:  # bytes the locale could not decode, kept by Python as lone surrogates (surrogateescape)
        raise UserError(
            f"the prompt is not UTF-8 text: byte(s) {', '.join(f'0x{b:02x}' for b in undecodable)} cannot "
            "be decoded; set a UTF-8 locale (e.g. export LANG=C.UTF-8), or put the prompt in a UTF-8 file "
            "and pass --prompt-file FILE"
        )
    try:
        ids = tokenizer.encode(prompt)
    except UserError as e:
        if "\\" in tokenizer.unknown(prompt) and "\\n" in prompt:
            raise UserError(f"{e}; {NEWLINE_HINT}") from None
        raise
    if block_size is not None and len(ids) > block_size:
        print(
            f"note: the prompt has {len(ids)} characters, more than this model's block_size of "
            f"{block_size}; using its last {block_size} (positions count from there)",
            file=sys.stderr,
        )
        ids = ids[-block_size:]
    return ids
