"""The run's request table, built from its record buffers one column at a time.

The table is the request records (:class:`~agentsim.metrics.records.RequestRecord`) with one
``hit_tokens_<tier>`` column per tier kind after ``prefill_s`` (summed from the long-form
:class:`~agentsim.metrics.records.TierHitRecord` rows, 0 where a request has none), sorted by
``request_id`` (stable) with a fresh index: the frame
``with_tier_hit_columns(requests.frame(), tier_hits.frame(), tiers).sort_values("request_id",
kind="stable").reset_index(drop=True)`` gives, value for value and dtype for dtype.

Why not build it that way: each of those steps copies the whole table (the buffer's frame, the
frame's consolidation into 2-D blocks, the copy before inserting columns, the sort's take), so
building the result of a long run held two to three tables at once, about 0.6 KB per request of
the process's peak on the GB300 rack. Here every column is expanded from its sealed chunks,
put in request order and handed to pandas without a copy, so the build holds the table plus one
column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from agentsim.memory_release import trim_heap
from agentsim.metrics.records import RecordBuffer, with_tier_hit_columns


def _tier_hit_columns(tier_hits: RecordBuffer, tiers, sorted_ids: np.ndarray) -> dict[str, np.ndarray]:
    """``hit_tokens_<tier>`` (int64, aligned with ``sorted_ids``, an increasing array of request
    ids) per name in ``tiers``: the sum of that tier's ``hit_tokens`` rows of each request id."""
    names = [f"hit_tokens_{tier}" for tier in tiers]
    if not len(tier_hits) or not len(sorted_ids):
        return {name: np.zeros(len(sorted_ids), dtype=np.int64) for name in names}
    hit_ids = tier_hits.column("request_id")
    hit_tokens = tier_hits.column("hit_tokens")
    hit_tiers = _object_array(tier_hits.column("tier"))
    out = {}
    for name, tier in zip(names, tiers):
        rows = hit_tiers == tier
        values = np.zeros(len(sorted_ids), dtype=np.int64)
        if rows.any():
            ids, at = np.unique(hit_ids[rows], return_inverse=True)
            sums = np.zeros(len(ids), dtype=np.int64)
            np.add.at(sums, at, hit_tokens[rows])
            where = np.minimum(np.searchsorted(ids, sorted_ids), len(ids) - 1)
            found = ids[where] == sorted_ids
            values[found] = sums[where[found]]
        out[name] = values
    return out


def _object_array(values: list) -> np.ndarray:
    """``values`` as a 1-D object array, whatever the values are (``np.array`` of a list would
    nest tuples or lists into more dimensions)."""
    return np.fromiter(values, dtype=object, count=len(values))


def request_table(requests: RecordBuffer, tier_hits: RecordBuffer, tiers, consume: bool = False) -> pd.DataFrame:
    """The request table of ``requests`` (a buffer of RequestRecord) and ``tier_hits`` (of
    TierHitRecord) for the tier kinds ``tiers``, in order (see the module docstring).

    ``consume``: empty both buffers as the table takes their values, column by column, handing
    each column's freed chunks back to the operating system (:func:`trim_heap`), so the build's
    peak is about the table rather than the table plus the buffers."""
    if not len(requests):
        frame = with_tier_hit_columns(requests.frame(), tier_hits.frame(), tiers)
        if consume:
            requests.clear()
            tier_hits.clear()
        return frame.sort_values("request_id", kind="stable").reset_index(drop=True)
    ids = requests.column("request_id")
    # A stable sort of increasing ids is the identity: skip the take then.
    order = None if bool(np.all(ids[1:] >= ids[:-1])) else np.argsort(ids, kind="stable")
    sorted_ids = ids if order is None else ids[order]
    hits = _tier_hit_columns(tier_hits, tiers, sorted_ids)
    del ids, sorted_ids
    if consume:
        tier_hits.clear()
        trim_heap()
    data = {}
    for name, values in requests.iter_columns(consume):
        if consume:
            trim_heap()     # the previous column's chunks, dropped as this one was asked for
        if order is not None:
            # A label list goes through an object array for the take (8 bytes a row while it
            # lasts, where a list of positions would hold an int object per row throughout).
            values = values[order] if isinstance(values, np.ndarray) else _object_array(values)[order].tolist()
        data[name] = values
        if name == "prefill_s":
            data.update(hits)
    if len(data) != len(requests.names) + len(hits):
        raise ValueError("request records have no prefill_s field to put the tier-hit columns after")
    # copy=False: the columns are this function's own arrays; pandas keeps them as they are
    # instead of consolidating them into a second copy.
    return pd.DataFrame(data, columns=list(data), copy=False)
