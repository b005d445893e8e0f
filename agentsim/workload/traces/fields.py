"""Field validation shared by the readers: one clear InputError per bad value.

``where`` is the location text (``"line 12"`` or ``"line 1: requests[3]"``); the message names
the field. Booleans are rejected where numbers are expected (JSON ``true`` is not a length).
"""

from __future__ import annotations

import math
from array import array

from agentsim.errors import InputError


def _fail(source: str, where: str, message: str) -> InputError:
    return InputError(message, source, where)


def require(record: dict, name: str, source: str, where: str):
    try:
        return record[name]
    except KeyError:
        raise _fail(source, where, f"missing field {name!r}") from None


def as_count(value, name: str, source: str, where: str) -> int:
    """A non-negative integer (token counts). Integral floats like ``12.0`` are accepted."""
    if type(value) is int:
        if value < 0:
            raise _fail(source, where, f"field {name!r} is negative ({value})")
        return value
    if type(value) is float and value.is_integer():
        if value < 0:
            raise _fail(source, where, f"field {name!r} is negative ({value})")
        return int(value)
    raise _fail(source, where, f"field {name!r} must be a non-negative integer, got {value!r}")


def as_time(value, name: str, source: str, where: str, *, allow_negative: bool = False) -> float:
    """A finite number of seconds (or milliseconds; the caller converts)."""
    if type(value) is int or type(value) is float:
        value = float(value)
        if not math.isfinite(value):
            raise _fail(source, where, f"field {name!r} must be finite, got {value!r}")
        if value < 0 and not allow_negative:
            raise _fail(source, where, f"field {name!r} is negative ({value})")
        return value
    raise _fail(source, where, f"field {name!r} must be a number, got {value!r}")


def optional_time(record: dict, name: str, source: str, where: str) -> float | None:
    value = record.get(name)
    if value is None:
        return None
    return as_time(value, name, source, where)


def as_str(value, name: str, source: str, where: str) -> str:
    if isinstance(value, str):
        return value
    raise _fail(source, where, f"field {name!r} must be a string, got {value!r}")


def as_block_keys(value, name: str, source: str, where: str, input_tokens: int, block_tokens: int,
                  *, offset: int = 0, limit: int | None = None) -> array:
    """Validate a ``hash_ids`` list and return it as ``array('q')`` (plus ``offset``).

    The list may be shorter than the prompt (partial tail blocks are sometimes omitted) but
    never longer than ``ceil(input_tokens / block_tokens)`` blocks. ``limit`` bounds each raw id
    (exclusive) so that namespaced keys cannot overflow into another namespace.
    """
    if not isinstance(value, list):
        raise _fail(source, where, f"field {name!r} must be a list of integers, got {type(value).__name__}")
    max_blocks = -(-input_tokens // block_tokens)
    if len(value) > max_blocks:
        raise _fail(source, where,
                    f"field {name!r} has {len(value)} blocks but {input_tokens} input tokens allow at most "
                    f"{max_blocks} blocks of {block_tokens} tokens")
    try:
        keys = array("q", value)
    except TypeError:
        bad = next((key for key in value if type(key) is not int), None)
        raise _fail(source, where, f"field {name!r} must hold non-negative integers, found {bad!r}") from None
    except OverflowError:
        raise _fail(source, where, f"field {name!r} holds an id beyond 64 bits") from None
    if keys:
        # The built-in min/max walk a request's few dozen ids faster than numpy's reductions,
        # whose fixed cost per call (~3 us) made them most of reading the Mooncake trace.
        low, high = min(keys), max(keys)
        if low < 0 or (limit is not None and high >= limit):
            bad = low if low < 0 else high
            bound = f" below {limit}" if limit is not None else ""
            raise _fail(source, where, f"field {name!r} must hold non-negative integers{bound}, found {bad}")
        if offset:  # the namespace offset at C speed (numpy views the array's buffer)
            import numpy as np

            keys = array("q", (np.frombuffer(keys, dtype=np.int64) + offset).tobytes())
    return keys
