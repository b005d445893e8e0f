"""Sealed chunks of a record column, stored in as few bytes as their values allow.

A run's record buffers (:class:`agentsim.metrics.records.RecordBuffer`) append to ``array``
columns of 8-byte values; every :data:`CHUNK_ROWS` rows they seal the chunk with :func:`seal`,
which keeps the same values in less memory:

* a chunk whose values are all the same (bit for bit: a float's sign and NaN payload count) is
  one value and a length: most of a request's fields of features a run does not use
  (disaggregation's hand-off times, preemption counters) never change;
* an int chunk is held in the narrowest of int8 / int16 / int32 / int64 that holds its minimum
  and maximum (ids, token counts and instance numbers need 1-4 bytes, not 8);
* a label chunk (strings) is its distinct values and one byte per row, up to 256 distinct.

:func:`expand` gives the chunk's values back exactly (int64, float64 or bool arrays; a list of
the labels), so a table built from sealed chunks equals the one built from the raw columns.
Float chunks that vary are kept as they are: the simulation's times need all 64 bits. numpy
does the per-chunk work in a few vectorised passes (no cost per appended value).
"""

from __future__ import annotations

from array import array

import numpy as np

#: Rows per sealed chunk: large enough that a chunk's fixed cost (an object or two, about 100
#: bytes) is a fraction of a byte a row, small enough that the open chunk's raw columns stay
#: a few MB.
CHUNK_ROWS = 8192

_DTYPES = {"q": np.int64, "d": np.float64, "b": np.int8}
_NARROW_INTS = (np.int8, np.int16, np.int32)


def seal(column, code: str | None):
    """The compact form of one open chunk: ``column`` is an ``array`` of type ``code`` ("q",
    "d" or "b") or, for ``code`` None, a list of labels. The result is read by :func:`expand`
    only."""
    if code is None:
        return _seal_labels(column)
    values = np.frombuffer(column, dtype=_DTYPES[code])
    bits = values.view(np.int64) if code == "d" else values
    if len(bits) and (bits == bits[0]).all():
        return ("same", code, bits[:1].copy(), len(bits))
    if code == "q":
        low, high = int(values.min()), int(values.max())
        for dtype in _NARROW_INTS:
            info = np.iinfo(dtype)
            if info.min <= low and high <= info.max:
                return ("narrow", code, values.astype(dtype))
    return ("raw", code, values.copy())


def _seal_labels(column: list):
    if column and all(type(value) is str for value in column):
        first = column[0]
        if all(value == first for value in column):
            return ("same", None, first, len(column))
        index = {value: i for i, value in enumerate(dict.fromkeys(column))}
        if len(index) <= 256:
            return ("codes", None, list(index), array("B", map(index.__getitem__, column)))
    return ("raw", None, list(column))


def expand(chunk):
    """The values :func:`seal` was given: a numpy array (int64, float64; int8 for a bool
    column) or a list of labels."""
    kind, code = chunk[0], chunk[1]
    if code is None:
        if kind == "same":
            return [chunk[2]] * chunk[3]
        if kind == "codes":
            labels = chunk[2]
            return [labels[i] for i in chunk[3]]
        return chunk[2]
    dtype = _DTYPES[code]
    if kind == "same":
        bits = np.full(chunk[3], chunk[2][0], dtype=np.int64 if code == "d" else dtype)
        return bits.view(np.float64) if code == "d" else bits
    if kind == "narrow":
        return chunk[2].astype(dtype)
    return chunk[2]


def nbytes(chunk) -> int:
    """Bytes of the chunk's values (not its small fixed objects)."""
    kind = chunk[0]
    if kind == "same":
        return 8
    if chunk[1] is None:
        return len(chunk[3]) if kind == "codes" else 8 * len(chunk[2])
    return chunk[2].nbytes
