"""check-timing's row log: one JSON line per emulated row, appended as each row finishes, and
read back so an interrupted run resumes where it stopped (``check-timing --rows-file PATH``).

A whole measured file runs for an hour or more; ``--json`` prints only at the end. The log keeps
every finished row on disk at once, with the settings it was run with (``--set`` overrides,
client lengths, ``--max-clients``): rows logged under other settings are refused, not mixed in.
A last line cut short by an interruption is dropped (and cut from the file) so the run appends
after the last whole row.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from agentsim.errors import InputError
from agentsim.experiments.timing_check import RowResult

#: The key of a logged row's run settings (its other keys are the RowResult's fields).
SETTINGS_KEY = "settings"
_FIELDS = {field.name for field in dataclasses.fields(RowResult)}


def settings_of(overrides: list[str] | None, client_lengths: bool, max_clients: int | None) -> dict:
    """The run settings a logged row records (and a resumed run must match)."""
    return {"set": sorted(overrides or []), "client_lengths": bool(client_lengths), "max_clients": max_clients}


def log_line(result: RowResult, settings: dict) -> str:
    """``result`` as one JSON line (with a trailing newline)."""
    return json.dumps({**dataclasses.asdict(result), SETTINGS_KEY: settings}) + "\n"


def read_log(path: Path, settings: dict) -> dict[str, RowResult]:
    """The rows ``path`` holds, by id (empty if it does not exist). Raises InputError naming the
    line of a malformed row or of one logged under other settings."""
    if not path.exists():
        return {}
    if not path.is_file():
        raise InputError("is not a file", str(path))
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        # The last row was being written when the run was interrupted: drop it, to be re-run.
        cut = raw.rfind(b"\n") + 1
        with path.open("r+b") as handle:
            handle.truncate(cut)
        raw = raw[:cut]
    results: dict[str, RowResult] = {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"is not UTF-8 text ({exc.reason} at byte {exc.start})", str(path)) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not a JSON row: {exc.msg}", str(path), where) from None
        if not isinstance(record, dict) or not {"id", "system", "backend", "mode"} <= record.keys():
            raise InputError("not a check-timing row (it needs id, system, backend and mode)", str(path), where)
        if record.get(SETTINGS_KEY) != settings:
            raise InputError(f"was logged with other settings ({record.get(SETTINGS_KEY)}; this run: {settings}); "
                             "give a new --rows-file", str(path), where)
        unknown = set(record) - _FIELDS - {SETTINGS_KEY}
        if unknown:
            raise InputError(f"unknown fields {sorted(unknown)}", str(path), where)
        try:
            result = RowResult(**{k: v for k, v in record.items() if k != SETTINGS_KEY})
        except TypeError as exc:
            raise InputError(f"not a check-timing row ({exc})", str(path), where) from None
        results[result.id] = result
    return results
