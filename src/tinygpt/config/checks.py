"""One config value checked against its field: its type, its range or choices, and the words for
what it allows (`describe`), so that a mistake is one line naming the key, the value and the rule.

A field's rules are its metadata, as `tinygpt.config.run_config.setting` writes them: help, low, high,
low_open, high_open, choices.
"""

import dataclasses
import math
from typing import Any

from tinygpt.errors import UserError


def check_value(f: dataclasses.Field, value: Any, name: str, source: str) -> Any:
    """Check one value against its field's type and range; return it in the field's type."""
    meta = f.metadata
    allowed = describe(f)
    bad = f"{source}: {name} = {value!r} is not allowed; {name} must be {allowed}"
    if f.type is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(bad)
    elif f.type is float:
        value = as_float(value)
        if value is None:
            raise UserError(bad)
    elif f.type is bool:
        if not isinstance(value, bool):
            raise UserError(bad)
    elif f.type is str:
        if not isinstance(value, str) or (not value and f.default != ""):  # "" only where it is the default
            raise UserError(bad)
        if meta["choices"] and value not in meta["choices"]:
            raise UserError(bad)
    elif f.type == int | str:  # a count or auto: train.threads
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(bad)
    elif f.type == list[float]:  # betas
        items = [as_float(v) for v in value] if isinstance(value, (list, tuple)) else []
        if len(items) != 2 or any(v is None or not 0.0 <= v < 1.0 for v in items):
            raise UserError(f"{bad}, written as a list: [0.9, 0.95] in YAML, --set '{name}=[0.9, 0.95]'")
        return items
    if not in_range(value, meta):
        raise UserError(bad)
    return value


def as_float(value: Any) -> float | None:
    """A finite number, or None. Strings like '1e-3' count: YAML 1.1 reads them as text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return value if math.isfinite(value) else None


def in_range(value: Any, meta: Any) -> bool:
    low, high = meta.get("low"), meta.get("high")
    if low is not None and (value < low or (meta["low_open"] and value == low)):
        return False
    return not (high is not None and (value > high or (meta["high_open"] and value == high)))


def describe(f: dataclasses.Field) -> str:
    """What a field allows, in words: 'an integer ≥ 1', 'one of cpu, cuda', …"""
    meta = f.metadata
    kinds = {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        str: "a string",
        int | str: "auto or an integer",
    }
    kind = kinds.get(f.type, "a list of two numbers in [0, 1)")  # the one list: betas
    if meta.get("choices"):
        return "one of " + ", ".join(meta["choices"])
    bounds = []
    if meta.get("low") is not None:
        bounds.append(f"{'>' if meta['low_open'] else '≥'} {number(meta['low'])}")
    if meta.get("high") is not None:
        bounds.append(f"{'<' if meta['high_open'] else '≤'} {number(meta['high'])}")
    return kind + (" " + " and ".join(bounds) if bounds else "")


def number(bound: float) -> str:
    """1.0 -> '1', 4294967295 -> '4294967295': whole numbers in full, others as short as they go."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"
