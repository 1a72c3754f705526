"""The one exception type for mistakes a user can fix.

Anything raised as `UserError` is shown by the command line as a single line on
stderr with exit code 2 and no traceback. Any other exception is a bug in
tinygpt and is allowed to show its traceback.
"""


class UserError(Exception):
    """A problem with the user's input (config, file, prompt, checkpoint), with how to fix it."""


class RankError(UserError):
    """A UserError that one process of a torchrun job met on its own (the others may not have)."""
