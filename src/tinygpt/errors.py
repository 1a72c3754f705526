"""The one exception type for mistakes a user can fix, and how a message shows what the user typed.

Anything raised as `UserError` is shown by the command line as a single line on
stderr with exit code 2 and no traceback. Any other exception is a bug in
tinygpt and is allowed to show its traceback.
"""

import reprlib


def shown(text: object) -> str:
    """text (a path, a name) as a message shows it: every character a terminal would act on instead
    of printing (a newline, a terminal escape, a direction override) written as repr writes it.

    'run\\nB' stays on one line, '\\x1b[31m' turns nothing red, and a U+202E reverses nothing after it.
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def described(value: object) -> str:
    """A value the user passed and its type, short and on one line, for a message: '5' (a str)."""
    kind = type(value).__name__
    return f"{reprlib.repr(value).replace(chr(10), ' ')} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


class UserError(Exception):
    """A problem with the user's input (config, file, prompt, checkpoint), with how to fix it.

    Its message is kept to the one line it is shown as: whatever a path in it holds is escaped (`shown`).
    """

    def __init__(self, message: str):
        super().__init__(shown(message))


class RankError(UserError):
    """A UserError that one process of a torchrun job met on its own (the others may not have)."""
