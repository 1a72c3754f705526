"""A mistake on the command line that argparse finds, said as tinygpt says a mistake.

argparse answers a value of the wrong kind, an unknown choice or option, or a missing
value with its usage text and a terse line (`invalid int value: '1e9'`); `Parser`
says it instead in one line, `error: …`, with what to type, and exits with 2, as
tinygpt.app.cli does for every other mistake. The value types of tinygpt's own options (`numbers`,
`html_path`) raise argparse's ArgumentTypeError with the fix, said in that line too.
"""

import argparse
import difflib
import re
import sys
from pathlib import Path
from typing import NoReturn

from tinygpt.config.run_config import key_for
from tinygpt.errors import shown


class Parser(argparse.ArgumentParser):
    """argparse under tinygpt's error policy: a mistake on the command line (a value of the wrong
    kind, an unknown choice or option, a missing value) is one line `error: …` with the fix, exit 2,
    instead of argparse's usage text. Each command's parser is one too (add_parser makes its kind)."""

    typed: list[str] = []  # the words this parser was given, for a fix that repeats one of them

    def parse_known_args(self, args=None, namespace=None):
        self.typed = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {shown(usage_mistake(self, message))}\n")


def usage_mistake(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's complaint, said as tinygpt says a mistake: what is wrong, then what to type."""
    listed = f"{parser.prog} --help lists them"
    argument = re.fullmatch(r"argument (\S+): (.*)", message, re.S)
    if argument:
        option, problem = argument.groups()
        return _argument_mistake(parser, option.split("/")[-1], problem)
    if message.startswith("unrecognized arguments: "):
        first = message.removeprefix("unrecognized arguments: ").split()[0]
        if not first.startswith("-"):
            return f"{parser.prog} takes no argument {first!r} here; {listed}"
        options = [o for a in parser._actions for o in a.option_strings]  # argparse keeps them here
        setting = _config_setting(parser, message.removeprefix("unrecognized arguments: ").split())
        if setting:
            return (
                f"{parser.prog} has no option {first}; config keys are set with --set, e.g. --set {setting}"
            )
        close = difflib.get_close_matches(first.partition("=")[0], options, 1)
        hint = f"did you mean {close[0]}? " if close else ""
        return f"{parser.prog} has no option {first}; {hint}{listed}"
    if message == "the following arguments are required: command":
        commands = "train, sample, inspect, explain, features, export, evaluate or bench"
        return f"name a command: {commands} (tinygpt --help)"
    if message.startswith("the following arguments are required: "):
        needed = message.removeprefix("the following arguments are required: ")
        return f"{parser.prog} needs {needed}; {parser.prog} --help says what it takes, with an example"
    ambiguous = re.fullmatch(r"ambiguous option: (\S+) could match (.*)", message)
    if ambiguous:
        return f"{ambiguous[1]} could be any of {ambiguous[2]}; write the whole option"
    return f"{message}; {parser.prog} --help lists the options"


def _config_setting(parser: argparse.ArgumentParser, words: list[str]) -> str | None:
    """`section.key=value` for a config key typed as an option, as nanoGPT takes them (`--max_iters=20`,
    `--compile`), where the command takes --set; else None."""
    if not any("--set" in a.option_strings for a in parser._actions):
        return None
    name, sep, value = words[0].lstrip("-").partition("=")
    key = key_for(name)
    if key is None:
        return None
    if not sep:  # `--max_iters 20`, or a flag alone: `--compile`
        value = words[1] if len(words) > 1 and not words[1].startswith("-") else "true"
    if key == "train.betas":
        return "'train.betas=[0.9, 0.95]' (a list: [beta1, beta2])"
    return f"{key}={value}"


def _argument_mistake(parser: argparse.ArgumentParser, option: str, problem: str) -> str:
    """One option's value refused by argparse: of the wrong kind, not a choice, or missing."""
    kind = re.fullmatch(r"invalid (int|float) value: '(.*)'", problem, re.S)
    if kind and kind[1] == "int":
        example = _whole(parser, option, kind[2])
        return f"{option} {kind[2]!r} is not a whole number; write one in digits, e.g. {option} {example}"
    if kind:
        return f"{option} {kind[2]!r} is not a number; write one such as {option} 0.5"
    choice = re.fullmatch(r"invalid choice: '(.*)' \(choose from (.*)\)", problem, re.S)
    if choice:
        given, choices = choice[1], [c.strip("'") for c in choice[2].split(", ")]
        close = difflib.get_close_matches(given, choices, 1)
        hint = f"; did you mean {close[0]}?" if close else ""
        what = "tinygpt has no command" if option == "command" else f"{option} takes no"
        return f"{what} {given!r}: choose one of {', '.join(choices)}{hint}"
    if problem.startswith("expected"):
        typed = getattr(parser, "typed", [])
        at = max((i for i, word in enumerate(typed) if word == option), default=None)  # the last: it failed
        after = typed[at + 1 : at + 2] if at is not None else []
        value = after[0] if after and after[0].startswith("-") else "-0.5"
        return (
            f"{option} needs a value after it; one that starts with '-' is joined to it by '=', "
            f"as in {option}={value}"
        )
    other = re.fullmatch(r"not allowed with argument (\S+)", problem)
    if other:
        return f"{option} and {other[1].split('/')[-1]} cannot be given together; give one of them"
    return f"{option} {problem}"  # tinygpt's own value checks (--html, --q …) already say the fix


def _whole(parser: argparse.ArgumentParser, option: str, text: str) -> str:
    """A whole number to show for the one typed: itself in digits if it is one (1e9), else the default."""
    try:
        number = float(text)
        if number.is_integer() and abs(number) < 1e18:
            return str(int(number))
    except ValueError:
        pass
    default = parser._option_string_actions[option].default  # argparse keeps each option's action here
    return str(default) if isinstance(default, int) else "100"


def numbers(text: str) -> list[float]:
    """'1,0.5' -> [1.0, 0.5], for vectors typed on the command line."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of numbers; write one such as 1,0.5"
        ) from None


def html_path(text: str) -> str:
    """--html's value, which must name an HTML file: `explain --html best.pt` would write over best.pt."""
    if text and Path(text).suffix.lower() not in (".html", ".htm"):  # "": --html alone
        raise argparse.ArgumentTypeError(
            f"{text!r}: the page is an HTML file; give a name ending in .html, or --html alone "
            "to write explain.html beside the checkpoint"
        )
    return text
