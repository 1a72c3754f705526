"""Reading a config file: only a small regular file of UTF-8 YAML, each key given once.

A config path could name a FIFO, /dev/zero or a huge file by mistake: it is opened
without blocking and checked on what was opened (a regular file, at most
MAX_CONFIG_BYTES) before anything is read. YAML itself keeps the last of a key given
twice; `UniqueKeyLoader` makes that an error naming both lines.
"""

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from tinygpt.errors import UserError

MAX_CONFIG_BYTES = 1_000_000  # a config is a few hundred bytes; anything this large is the wrong file


class DuplicateKey(Exception):
    """A mapping in a YAML file that gives the same key twice."""

    def __init__(self, key: Any, first_line: int, second_line: int):
        super().__init__(key, first_line, second_line)
        self.key, self.first_line, self.second_line = key, first_line, second_line


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader, except that a key given twice in one mapping is an error, not last-one-wins."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        self.flatten_mapping(node)  # merge keys (<<) first, as SafeLoader does
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in lines:
                    raise DuplicateKey(key, lines[key], line)
                lines[key] = line
            except TypeError:  # an unhashable key: SafeLoader's own message covers it
                pass
        return super().construct_mapping(node, deep)


def read_text(path: Path, shipped: list[str]) -> str:
    """The config file's text: a regular UTF-8 file of at most MAX_CONFIG_BYTES, checked before reading.

    The file is opened without blocking (a FIFO would otherwise wait for a writer) and
    what was opened is checked, so the path cannot change between the check and the read.
    """
    try:
        with open(path, "rb", opener=_open_nonblocking) as f:
            _check_regular(os.fstat(f.fileno()), path)
            data = f.read(MAX_CONFIG_BYTES + 1)  # a file that grew since fstat is still cut off
    except FileNotFoundError:
        raise UserError(
            f"config file {path} does not exist; pass a YAML file or the name of a shipped config "
            f"({', '.join(shipped)}), e.g. --config cpu"
        ) from None
    except IsADirectoryError:
        raise UserError(_is_a_directory(path)) from None
    except PermissionError:
        raise UserError(f"config file {path} cannot be read (permission denied)") from None
    except OSError as e:  # a loop of links, a path through a file, a name too long, …
        raise UserError(
            f"config file {path} cannot be read ({e.strerror}); pass a YAML file, e.g. configs/cpu.yaml"
        ) from None
    _check_size(len(data), path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"config file {path} is not UTF-8 text (bad byte at offset {e.start})") from None


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def _check_regular(info: os.stat_result, path: Path) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise UserError(_is_a_directory(path))
    if not stat.S_ISREG(info.st_mode):
        raise UserError(
            f"config {path} is not a regular file (a device, pipe or socket); pass a YAML file, "
            "e.g. configs/cpu.yaml"
        )
    _check_size(info.st_size, path)


def _is_a_directory(path: Path) -> str:
    return f"config {path} is a directory; pass a YAML file, e.g. configs/cpu.yaml"


def _check_size(size: int, path: Path) -> None:
    if size > MAX_CONFIG_BYTES:
        raise UserError(
            f"config file {path} is larger than any config ({MAX_CONFIG_BYTES:,} bytes at most); "
            "pass a YAML config, e.g. configs/cpu.yaml"
        )


def _parse_yaml(text: str, path: Path) -> Any:
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except DuplicateKey as e:
        raise UserError(
            f"config file {path} gives key {e.key!r} twice, at lines {e.first_line} and {e.second_line}; "
            "keep one of them"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"config file {path} is not valid YAML{where}: {problem}") from None
    except ValueError as e:  # YAML reads 2001-02-30 as a date, and no such date exists
        raise UserError(f"config file {path} holds a value YAML cannot read: {e}; quote it") from None
    except RecursionError:
        raise UserError(f"config file {path} is nested too deeply to read") from None


def read_yaml(path: Path, shipped: list[str]) -> Any:
    """The YAML document in a config file, or a UserError that says what is wrong with the file
    (a missing one lists the `shipped` configs, which can be named instead)."""
    return _parse_yaml(read_text(path, shipped), path)
