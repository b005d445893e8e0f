"""Typed metric records and the columnar buffers that store them.

Each record type is a slotted dataclass: the schema (field names, types, units in the names).
A run appends records to a :class:`RecordBuffer`, which keeps them as columns (ints and floats in
``array`` buffers, eight bytes a value and no Python object per value or per row), and turns
them into a long-form pandas DataFrame (one row per record, one column per field) at the end.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, fields
from operator import attrgetter

import numpy as np
import pandas as pd

from agentsim.metrics.chunk_spill import ChunkSpill, chunk_nbytes, loaded
from agentsim.metrics.compact_columns import CHUNK_ROWS, expand, seal


@dataclass(slots=True)
class RequestRecord:
    """One finished (or rejected) LLM call. Times in simulated seconds."""

    request_id: int
    session_id: int
    agent_class: str
    depth: int                 # 0 for a top-level agent, 1+ for sub-agents
    call_index: int
    instance: int
    arrival_s: float
    gap_before_s: float        # think/tool/human gap that preceded this call (nan for the first)
    gap_kind: str              # "first", "tool", "human", "join"
    prompt_tokens: int
    output_tokens: int
    hit_tokens: int
    recomputed_tokens: int
    queue_wait_s: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    finish_s: float
    slo_met: bool
    rejected: bool
    # Memory hierarchy (TTFT = queue_wait + load_wait + prefill). Hit tokens by serving tier are
    # TierHitRecord rows, joined on as hit_tokens_<tier> columns by with_tier_hit_columns.
    load_wait_s: float = float("nan")
    prefill_s: float = float("nan")
    loaded_bytes: float = 0.0
    # Engine-style KV admission: times this call was preempted (all kinds, and by swapping its
    # KV to DRAM), the tokens its preemptions made it compute again, and its time in the
    # waiting queue before its first admission by cause: for a batch slot, for KV memory, held
    # by its own load, for the iteration in progress (they sum to queue_wait_s), then, once
    # admitted, for its first prefill chunk (nan if none); requeue_wait_s: its time waiting in
    # the queue again after preemptions (part of its prefill or decode time, not of queue_wait_s).
    preemptions: int = 0
    swap_preemptions: int = 0
    preempted_recompute_tokens: int = 0
    queue_slot_s: float = 0.0
    queue_kv_s: float = 0.0
    queue_load_s: float = 0.0
    queue_step_s: float = 0.0
    queue_chunk_s: float = float("nan")
    requeue_wait_s: float = 0.0
    # Disaggregated serving (TTFT = queue_wait + prefill + decode_queue + kv_transfer): the
    # prefill worker (-1: aggregated), the decode worker's own cached prefix, the KV hand-off.
    prefill_worker: int = -1
    decode_hit_tokens: int = 0
    kv_transfer_bytes: float = 0.0
    decode_queue_s: float = float("nan")
    kv_transfer_s: float = float("nan")
    decode_first_step_s: float = float("nan")
    # Recomputed prompt tokens (prompt - hit) by why they were not hits; they sum to
    # recomputed_tokens (agentsim.engine.recompute): never cached on this instance, lost to an
    # eviction or TTL expiry, invalidated by a history rewrite.
    recomputed_cold_tokens: int = 0
    recomputed_evicted_tokens: int = 0
    recomputed_invalidated_tokens: int = 0
    # Why a rejected call was not served (agentsim.cluster.serving.admission.REJECT_REASONS);
    # "" for a served one.
    reject_reason: str = ""


@dataclass(slots=True)
class TierHitRecord:
    """Tokens of one request's prompt served by one tier kind (rows only for tiers that served
    some): long form, so a new tier kind needs no new field anywhere."""

    request_id: int
    tier: str
    hit_tokens: int


@dataclass(slots=True)
class OccupancySample:
    """Periodic sample of one instance's cache and batch."""

    time_s: float
    instance: int
    tier: str
    used_blocks: int
    capacity_blocks: int
    pinned_blocks: int
    running_requests: int
    waiting_requests: int


def with_tier_hit_columns(requests: pd.DataFrame, tier_hits: pd.DataFrame, tiers) -> pd.DataFrame:
    """``requests`` with one int64 ``hit_tokens_<tier>`` column per name in ``tiers`` (in that
    order, after ``prefill_s``), summed from the long-form ``tier_hits`` rows (TierHitRecord);
    0 where a request has no row for a tier."""
    at = requests.columns.get_loc("prefill_s") + 1
    if len(tier_hits) and len(requests):
        wide = tier_hits.pivot_table(index="request_id", columns="tier", values="hit_tokens", aggfunc="sum", fill_value=0)
        wide = wide.reindex(requests["request_id"].to_numpy())
    else:
        wide = None
    out = requests.copy() if len(requests.columns) else requests
    for offset, tier in enumerate(tiers):
        if wide is not None and tier in wide.columns:
            values = wide[tier].fillna(0).to_numpy(dtype=np.int64)
        else:
            values = np.zeros(len(requests), dtype=np.int64)
        out.insert(at + offset, f"hit_tokens_{tier}", values)
    return out


def columns(record_type) -> list[str]:
    return [f.name for f in fields(record_type)]


@dataclass(slots=True)
class EvictionSample:
    """Cumulative blocks one instance's cache tier has removed for ``reason`` up to ``time_s``.

    Sampled with the occupancy samples; only reasons seen so far appear (a missing row means 0).
    Per-interval evictions are the differences between consecutive samples of one
    (instance, tier, reason). HBM capacity evictions of blocks released by a pin time-out or a
    pressure unpin are reported under those reasons, as in ``evictions_by_reason_blocks``.
    """

    time_s: float
    instance: int
    tier: str
    reason: str
    evicted_blocks: int


@dataclass(slots=True)
class LinkSample:
    """Cumulative traffic of one link up to ``time_s`` (sampled with the occupancy samples).

    Utilisation over an interval = difference of ``busy_s`` / interval length; throughput =
    difference of ``bytes`` / interval length.
    """

    time_s: float
    link: str
    kind: str
    bandwidth_bytes_per_s: float
    bytes: float
    busy_s: float
    active_transfers: int


def record_frame(records: list, record_type) -> pd.DataFrame:
    """``records`` (instances of the slotted dataclass ``record_type``) as a DataFrame, one row
    per record and one column per field, in field order.

    Built column by column (one ``attrgetter`` pass, then a transpose), the same frame as
    ``DataFrame.from_records`` of one dict per record at a fraction of the cost: a run of 65,000
    requests spent seconds building those dicts.
    """
    names = list(record_type.__slots__)
    if len(names) < 2 or not records:
        return pd.DataFrame.from_records([{n: getattr(r, n) for n in names} for r in records], columns=names)
    columns = zip(*map(attrgetter(*names), records))
    return pd.DataFrame(dict(zip(names, map(list, columns))), columns=names)


#: ``array`` type codes of numeric record fields (annotations are strings: postponed evaluation).
_NUMERIC_CODES = {"int": "q", "float": "d", "bool": "b"}
#: numpy dtype of an open buffer's ``array`` of each type code.
_OPEN_DTYPES = {"b": np.int8, "q": np.int64, "d": np.float64}


def _chunk_values(chunk):
    """A sealed chunk's values, read back first if it was spilled."""
    return expand(loaded(chunk))


def _held(chunk):
    """A sealed chunk kept as it is (a buffer without a spill)."""
    return chunk


def _one_tuple_getter(name: str):
    """``record -> (record.name,)``: the getter of a type code with a single field."""
    get = attrgetter(name)
    return lambda record: (get(record),)


class RecordBuffer:
    """Rows of one record type, kept in raw buffers and sealed into compact chunks.

    ``append(record)`` unpacks a record at once, so the record object does not outlive the
    call: a rack hour's 65,000 request records take 8 bytes per numeric value instead of a
    slotted object per row plus a float object per value. The numeric fields of one type (int,
    float, bool) share one row-major ``array`` (one C-level ``fromlist`` of their values per row,
    where an ``append`` per field was the largest part of a finished request's bookkeeping);
    each label field has a list. Every :data:`~agentsim.metrics.compact_columns.CHUNK_ROWS`
    rows the open buffers are sealed field by field into compact chunks
    (:mod:`agentsim.metrics.compact_columns`: a constant chunk is one value, ints in the
    narrowest type that holds them, labels one byte a row), so a long run's records cost a few
    bytes per value. ``frame()`` gives the same DataFrame as :func:`record_frame` of the records
    (same columns, order and dtypes: int fields int64, float fields float64, bool fields bool,
    the rest as pandas infers from a list). ``len()`` and ``clear()`` work as for a list.

    ``spill`` (the default): sealed chunks go to a temporary file as they are sealed and are read
    back when the columns are built (:mod:`agentsim.metrics.chunk_spill`), so the records a run
    holds in memory are the open chunk's, whatever the run's length.
    """

    def __init__(self, record_type, spill: bool = True):
        self.record_type = record_type
        self._spill = ChunkSpill() if spill else None
        self.names = list(record_type.__slots__)
        types = {f.name: f.type for f in fields(record_type)}
        self._codes = [_NUMERIC_CODES.get(types[name]) for name in self.names]
        self._code_of = dict(zip(self.names, self._codes))
        #: type code -> the fields stored in its array, in field order.
        self._groups = {code: [n for n, c in zip(self.names, self._codes) if c == code]
                        for code in dict.fromkeys(c for c in self._codes if c)}
        self._label_names = [n for n, c in zip(self.names, self._codes) if not c]
        self.clear()

    def clear(self) -> None:
        #: Per field: its sealed chunks (or their spilled handles), oldest first.
        self._sealed: dict[str, list] = {name: [] for name in self.names}
        if self._spill is not None:
            self._spill.close()
        self._open()
        self._rows = 0

    def _open(self) -> None:
        self._arrays = {code: array(code) for code in self._groups}
        self._labels = {name: [] for name in self._label_names}
        #: (fromlist of an array, getter of its fields' values as a tuple) per type code, and
        #: (append of a list, getter of its field) per label field.
        self._numeric_fill = [(self._arrays[code].fromlist, attrgetter(*names) if len(names) > 1
                               else _one_tuple_getter(names[0])) for code, names in self._groups.items()]
        self._label_fill = [(target.append, attrgetter(name)) for name, target in self._labels.items()]
        self._open_rows = 0

    def __len__(self) -> int:
        return self._rows

    def append(self, record) -> None:
        # ``fromlist`` of a list converts the values in one C loop (``extend`` of the tuple goes
        # through the iterator protocol per value and costs half as much again).
        for fromlist, get in self._numeric_fill:
            fromlist(list(get(record)))
        for append, get in self._label_fill:
            append(get(record))
        self._rows += 1
        self._open_rows += 1
        if self._open_rows == CHUNK_ROWS:
            keep = self._spill.put if self._spill is not None else _held
            for name, column in self._open_columns().items():
                self._sealed[name].append(keep(seal(column, self._code_of[name])))
            self._open()

    def _open_columns(self) -> dict:
        """The open rows field by field: a contiguous numpy array per numeric field (its own
        copy), the list itself per label field."""
        columns = {}
        for code, names in self._groups.items():
            rows = np.frombuffer(self._arrays[code], dtype=_OPEN_DTYPES[code]).reshape(self._open_rows, len(names))
            for j, name in enumerate(names):
                columns[name] = rows[:, j].copy()
        columns.update(self._labels)
        return columns

    def nbytes(self) -> int:
        """Bytes of the values held (sealed chunks, in memory or spilled, and the open buffers)."""
        open_bytes = sum(values.itemsize * len(values) for values in self._arrays.values())
        open_bytes += sum(8 * len(labels) for labels in self._labels.values())
        return open_bytes + sum(chunk_nbytes(chunk) for sealed in self._sealed.values() for chunk in sealed)

    def spilled_bytes(self) -> int:
        """Bytes of the temporary file the sealed chunks went to (0 without a spill)."""
        return self._spill.spilled_bytes if self._spill is not None else 0

    def column(self, name: str):
        """Every row's value of field ``name``: a new numpy array (int64, float64 or bool) for a
        numeric field, a new list for a label field."""
        code, sealed = self._code_of[name], self._sealed[name]
        if code:
            names = self._groups[code]
            rows = np.frombuffer(self._arrays[code], dtype=_OPEN_DTYPES[code]).reshape(self._open_rows, len(names))
            values = np.concatenate([_chunk_values(chunk) for chunk in sealed] + [rows[:, names.index(name)]])
            return values.astype(bool) if code == "b" else values
        return [label for chunk in sealed for label in _chunk_values(chunk)] + self._labels[name]

    def iter_columns(self, consume: bool = False):
        """``(name, values)`` per field in field order, every row: numeric fields as their own
        numpy arrays (int64, float64 or bool), label fields as new lists. One column is built at
        a time, so a caller that consumes them one by one holds one column beyond its own.

        ``consume``: drop each field's chunks once its values are handed out (when the caller
        asks for the next), and leave the buffer empty at the end, so the values are held once,
        by the caller, instead of twice."""
        open_columns = self._open_columns()
        if consume:
            self._open()    # the open rows are in open_columns now
        for name in self.names:
            column, code, sealed = open_columns[name], self._code_of[name], self._sealed[name]
            if code:
                # concatenate copies: the values must not share memory with a buffer that may
                # grow again.
                values = np.concatenate([_chunk_values(chunk) for chunk in sealed] + [column])
                yield name, (values.astype(bool) if code == "b" else values)
            else:
                yield name, ([label for chunk in sealed for label in _chunk_values(chunk)] + column if sealed
                             else list(column))
            if consume:
                del sealed[:], column
                open_columns[name] = None
        if consume:
            self.clear()

    def frame(self) -> pd.DataFrame:
        if not self._rows:
            return record_frame([], self.record_type)   # the empty table as it always was
        return pd.DataFrame(dict(self.iter_columns()), columns=self.names)
