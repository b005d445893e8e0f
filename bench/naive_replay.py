"""The naive reference of the CLI start-up benchmark: a stand-alone cache-only prefix-LRU replay.

Standard library only (``gzip`` + ``json`` reading, an ``OrderedDict`` LRU), so that, run as its
own process, it costs what a user's throw-away script would: interpreter start, reading the
Mooncake trace, sorting by timestamp (file order for ties), one replay at a capacity of a
fraction of the unique blocks, one JSON line out. ``naive_prefix_lru`` is also the in-process
reference of ``bench/replay.py``.

    python bench/naive_replay.py TRACE.jsonl.gz [--capacity-fraction 0.1]
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import OrderedDict


def naive_prefix_lru(requests, capacity: int) -> int:
    """Hit blocks of a textbook prefix LRU over block keys (the reference; no radix tree).

    A request's hits are its longest resident prefix; then every block of the request is
    touched deepest first (so the shallowest is the most recent and the deepest goes first on
    ties) and blocks are evicted from the LRU end until the capacity holds.
    """
    lru: OrderedDict[int, None] = OrderedDict()
    move_to_end = lru.move_to_end
    pop_oldest = lru.popitem
    hits = 0
    for keys in requests:
        hit = 0
        for key in keys:
            if key in lru:
                hit += 1
            else:
                break
        hits += hit
        for key in reversed(keys):
            if key in lru:
                move_to_end(key)
            else:
                lru[key] = None
        while len(lru) > capacity:
            pop_oldest(last=False)
    return hits


def main(argv: list[str]) -> None:
    path = argv[0]
    fraction = float(argv[argv.index("--capacity-fraction") + 1]) if "--capacity-fraction" in argv else 0.1
    with gzip.open(path, "rt") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    records.sort(key=lambda record: record["timestamp"])  # stable: file order for ties
    requests = [record["hash_ids"] for record in records]
    unique = len({key for keys in requests for key in keys})
    capacity = int(unique * fraction)
    hits = naive_prefix_lru(requests, capacity)
    requested = sum(len(keys) for keys in requests)
    print(json.dumps({"requests": len(requests), "capacity_blocks": capacity, "hit_blocks": hits,
                      "hit_ratio": hits / requested}))


if __name__ == "__main__":
    main(sys.argv[1:])
