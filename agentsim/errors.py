"""User-facing errors.

Every problem caused by the user's input (a scenario file, a trace, a command-line value) is
raised as :class:`InputError`. The CLI turns it into one clear message and exit code 2; no
traceback is shown. Internal bugs are left as ordinary exceptions.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(Exception):
    """Bad user input.

    Args:
        message: what is wrong, in one sentence.
        source: the file (or "--set", "command line") the input came from.
        location: where in it: a YAML path like ``cache.eviction.name`` and/or ``line 12``.
    """

    def __init__(self, message: str, source: str | None = None, location: str | None = None):
        self.message = message
        self.source = source
        self.location = location
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.source and self.location:
            where = f"{self.source}: {self.location}: "
        elif self.source:
            where = f"{self.source}: "
        elif self.location:
            where = f"{self.location}: "
        return f"{where}{self.message}"


def closest_name(word: object, choices: Iterable[object], cutoff: float = 0.6) -> str | None:
    """The choice closest to ``word`` (difflib's ratio at least ``cutoff``), or None."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(word: object, choices: Iterable[object], cutoff: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``word``, or "" if none is close."""
    close = closest_name(word, choices, cutoff)
    return f" (did you mean {close!r}?)" if close is not None else ""


class FieldError(ValueError):
    """A cross-field check of a config model that blames one field.

    Raised inside a pydantic validator, it reaches the error mapping as the cause of a value
    error located at the model itself; ``path`` (relative to that model) then names the field,
    so the message gets its YAML path and line instead of "(top level)".
    """

    def __init__(self, path: tuple[str, ...], message: str):
        super().__init__(message)
        self.path = tuple(path)


class InvariantViolation(AssertionError):
    """A simulation invariant (capacity, pins, conservation) was broken: a bug, not bad input."""
