"""Belady's next-use index: for every block key, the requests that use it, in order.

An index maps a key to a *slot* and lists each slot's uses: ``positions[bounds[s]:bounds[s + 1]]``
are the distinct request indices (ascending) that hold the keys of slot ``s``. A next-use query
is a dict lookup and a bisect. Three builders give the same answers for every key:

* :func:`index_by_sorting`: one slot per key, from a stable numpy sort of every (key, request)
  use. O(total keys) numpy work; the fastest for short requests (a trace such as Mooncake).
* :func:`index_by_prefix_runs`: one slot per run of keys that the same requests share, from a
  radix tree of the requests. An agent's calls re-send its whole history, so a simulated run's
  stream has about 700 keys per request but only a few dozen distinct runs per request; the
  tree costs a path walk per request instead of numpy work per key (3.6x less time on the
  default scenario's stream, 7x more on Mooncake's short requests). Exact when every key sits
  in one run of the tree, which holds when a key determines its prefix (chained block hashes,
  the simulator's allocator); it returns None otherwise, and the caller sorts.
* :func:`index_in_python`: a dict of lists, for keys beyond int64 (numpy cannot hold them).
"""

from __future__ import annotations

import itertools
from array import array
from itertools import repeat
from typing import NamedTuple, Sequence

import numpy as np

from agentsim.cache.radix_tree import _common_prefix
from agentsim.workload.key_runs import KEY_DTYPES


class NextUseIndex(NamedTuple):
    #: key -> slot; None when the keys are exactly 0..n-1 and each key is its own slot.
    slot_of: dict[int, int] | None
    bounds: array
    positions: array


#: Mean request length (keys) from which :func:`index_by_prefix_runs` is tried first.
PREFIX_RUNS_MIN_MEAN_KEYS = 64


def build_index(requests: Sequence[Sequence[int]]) -> NextUseIndex:
    """The index of ``requests`` (each a sequence of keys, root first), by the fastest exact
    builder for their shape."""
    total = sum(map(len, requests))
    if requests and total >= PREFIX_RUNS_MIN_MEAN_KEYS * len(requests):
        index = index_by_prefix_runs(requests)
        if index is not None:
            return index
    index = index_by_sorting(requests, total)
    return index if index is not None else index_in_python(requests)


def _common_typecode(requests: Sequence[Sequence[int]]) -> str | None:
    """The type code every request's keys share, if they are all ``array`` of one code in
    ``KEY_DTYPES`` (None otherwise, or with no requests)."""
    if not requests:
        return None
    first = requests[0]
    code = first.typecode if type(first) is array else None
    if code not in KEY_DTYPES:
        return None
    return code if all(type(keys) is array and keys.typecode == code for keys in requests) else None


def index_by_sorting(requests: Sequence[Sequence[int]], total: int | None = None) -> NextUseIndex | None:
    """One slot per key, from a numpy sort of all (key, request) uses; None if a key does not
    fit in int64."""
    lengths = np.fromiter(map(len, requests), dtype=np.int64, count=len(requests))
    typecode = _common_typecode(requests)
    if typecode is not None:
        # Compact key arrays (trace requests' int64, agents' uint32), all of one type: their
        # buffers joined in C (no Python int per key, no numpy view per request).
        keys = np.frombuffer(b"".join(requests), dtype=KEY_DTYPES[typecode]).astype(np.int64, copy=False)
    else:
        try:
            count = int(lengths.sum()) if total is None else total
            keys = np.fromiter(itertools.chain.from_iterable(requests), dtype=np.int64, count=count)
        except OverflowError:
            return None
    index = np.repeat(np.arange(len(requests), dtype=np.int64), lengths)
    n_requests = max(1, len(requests))
    if len(keys) and keys.min() >= 0 and int(keys.max()) < np.iinfo(np.int64).max // n_requests - 1:
        # Keys and request indices packed into one int64 (key * n_requests + request) and
        # sorted by value: the same (key, request) order as the stable argsort below, in about
        # half its time (a value sort moves no index array; trace keys are small ints).
        packed = keys * n_requests + index
        packed.sort()
        keys = packed // n_requests
        index = packed - keys * n_requests
    else:
        order = np.argsort(keys, kind="stable")  # stable: request order kept within a key
        keys, index = keys[order], index[order]
    if len(keys):
        new_key = np.r_[True, keys[1:] != keys[:-1]]
        keep = new_key.copy()
        keep[1:] |= index[1:] != index[:-1]
        if not keep.all():  # a key repeated within a request (rare): keep one use
            keys, index = keys[keep], index[keep]
            new_key = np.r_[True, keys[1:] != keys[:-1]]
        first = np.flatnonzero(new_key)
    else:
        first = np.zeros(0, dtype=np.int64)
    if len(first) and keys[first[0]] == 0 and keys[first[-1]] == len(first) - 1:
        # The keys are exactly 0..n-1 (traces with dense block ids, e.g. Mooncake's hash
        # ids): a key is its own slot, and the key -> slot dict is not built.
        slot_of = None
    else:
        slot_of = dict(zip(keys[first].tolist(), range(len(first))))
    # Compact int64 arrays, not lists: built without one Python int per use (~11 ms on
    # Mooncake), and a next-use query reads only two bounds and a few bisect probes.
    bounds = array("q", first.astype(np.int64).tobytes())
    bounds.append(len(keys))
    return NextUseIndex(slot_of, bounds, array("q", index.astype(np.int64).tobytes()))


def index_by_prefix_runs(requests: Sequence[Sequence[int]]) -> NextUseIndex | None:
    """One slot per run of a radix tree of the requests; None if a key sits in two runs.

    Requests are inserted in order; a node ``[keys, children, uses]`` records every request
    whose keys contain its whole run (a request that ends inside a run splits it, so it never
    holds part of one), so a key's uses are its run's uses.
    """
    root: list = [[], {}, []]
    for request_index, sequence in enumerate(requests):
        keys = sequence if type(sequence) is list else list(sequence)
        node = root
        pos = 0
        n = len(keys)
        while pos < n:
            children = node[1]
            child = children.get(keys[pos])
            if child is None:
                children[keys[pos]] = [keys[pos:], {}, [request_index]]
                break
            run = child[0]
            length = len(run)
            if keys[pos:pos + length] == run:
                child[2].append(request_index)
                node = child
                pos += length
                continue
            # The request leaves (or ends inside) this run: split it where they part.
            common = _common_prefix(run, keys, pos)
            upper = [run[:common], {run[common]: child}, child[2] + [request_index]]
            child[0] = run[common:]
            children[keys[pos]] = upper
            node = upper
            pos += common
    slot_of: dict[int, int] = {}
    bounds = array("q", [0])
    positions = array("q")
    keys_seen = 0
    stack = list(root[1].values())
    while stack:
        node = stack.pop()
        slot_of.update(zip(node[0], repeat(len(bounds) - 1)))
        keys_seen += len(node[0])
        positions.extend(node[2])
        bounds.append(len(positions))
        stack.extend(node[1].values())
    if len(slot_of) != keys_seen:
        return None  # a key in two runs (keys that do not determine their prefix)
    return NextUseIndex(slot_of, bounds, positions)


def index_in_python(requests: Sequence[Sequence[int]]) -> NextUseIndex:
    """One slot per key from a dict of use lists (any int keys)."""
    uses: dict[int, list[int]] = {}
    for index, keys in enumerate(requests):
        for key in keys:
            positions = uses.get(key)
            if positions is None:
                uses[key] = [index]
            elif positions[-1] != index:
                positions.append(index)
    slot_of: dict[int, int] = {}
    bounds: list[int] = [0]
    flat: list[int] = []
    for key, positions in uses.items():
        slot_of[key] = len(slot_of)
        flat.extend(positions)
        bounds.append(len(flat))
    return NextUseIndex(slot_of, bounds, flat)
