"""Reading the files agentsim wrote (summary.json, cell.json, Parquet tables), validated.

``report`` and a resumed ``sweep`` read what an earlier process left: it may be truncated (a
kill mid-write on a filesystem that lost the rename's data), empty, edited by hand, or not
agentsim's at all. Each reader here says what is wrong with which file as one
:class:`~agentsim.errors.InputError`, instead of a JSONDecodeError or ArrowInvalid traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from agentsim.errors import InputError
from agentsim.input_files import read_input_text, require_regular_file


class _NonFinite(ValueError):
    """``NaN``/``Infinity`` in a JSON file: Python's json reads them, agentsim never writes them."""


def _no_constant(name: str):
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    # 1e999 is valid JSON that Python reads as infinity; agentsim writes no such number.
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NonFinite(f"the number {text[:40]} (beyond the float range)")
    return value


def read_json_object(path: str | Path, what: str = "JSON file") -> dict:
    """The JSON object in ``path``; InputError if the file is missing, empty, not JSON or not an
    object (a list, a number)."""
    path = Path(path)
    text = read_input_text(path, what)
    if not text.strip():
        raise InputError(f"{what} is empty (a write that did not finish?)", str(path))
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except _NonFinite as exc:
        raise InputError(f"{what} holds {exc.args[0]}, which agentsim never writes (it writes null for a value "
                         "that is not finite)", str(path)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON ({exc.msg}; truncated?)", str(path),
                         f"line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to be agentsim's", str(path)) from None
    except ValueError as exc:  # an integer of more than 4,300 digits (Python refuses to read it)
        raise InputError(f"{what} holds a number too long to read ({str(exc).split(';')[0]})", str(path)) from None
    if not isinstance(data, dict):
        raise InputError(f"{what} must hold a JSON object, got {type(data).__name__}", str(path))
    return data


def read_table(path: str | Path, required_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A Parquet table; InputError naming the file if it is not a regular file, not readable
    Parquet or lacks one of ``required_columns``."""
    import pyarrow

    path = Path(path)
    require_regular_file(path, "Parquet file")  # pyarrow would read a directory as a dataset
    try:
        table = pd.read_parquet(path)
    except (pyarrow.ArrowException, OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise InputError(f"not a readable Parquet table ({reason})", str(path)) from None
    missing = [name for name in required_columns if name not in table.columns]
    if missing:
        raise InputError(f"not an agentsim table: no column {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}", str(path))
    return table
