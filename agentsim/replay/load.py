"""Loading a trace for replay: format resolution, sorting, re-blocking, collected warnings."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from agentsim.errors import InputError
from agentsim.input_files import resolved_path
from agentsim.workload.traces import TraceOrderWarning, TraceRequest, load_requests, resolve_format


@dataclass(slots=True)
class LoadedTrace:
    """Requests in replay order (timestamp, then file order) and what was noticed on the way."""

    path: str
    fmt: str
    requests: list[TraceRequest]
    block_tokens: int
    warnings: list[str] = field(default_factory=list)
    load_time_s: float = 0.0


def load_trace(path: str | Path, fmt: str = "auto", *, block_tokens: int | None = None,
               session_offset_s: float = 0.0) -> LoadedTrace:
    """Read ``path`` (file, or directory of WEKA sessions) ready for replay.

    Order warnings (decreasing timestamps) are collected instead of printed, so a CLI can show
    them as one line each.
    """
    import time

    path = Path(path)
    resolved_path(path, "trace file")  # a symlink loop or a name too long: one error, not a traceback
    if not path.exists():
        raise InputError("trace file not found", str(path))
    if not 0 <= session_offset_s < math.inf:  # also NaN: every later session would start at NaN
        raise InputError(f"--session-offset must be a finite non-negative number, got {session_offset_s}", "--session-offset")
    started = time.perf_counter()
    fmt = resolve_format(path, fmt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceOrderWarning)
        requests = load_requests(path, fmt, block_tokens=block_tokens, session_offset_s=session_offset_s)
    notes = [str(w.message) for w in caught if issubclass(w.category, TraceOrderWarning)]
    for w in caught:
        if not issubclass(w.category, TraceOrderWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return LoadedTrace(path=str(path), fmt=fmt, requests=requests, block_tokens=requests[0].block_tokens,
                       warnings=notes, load_time_s=time.perf_counter() - started)
