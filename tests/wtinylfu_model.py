"""A per-object model of W-TinyLFU whose every rule can follow libCacheSim or agentsim.

Used by ``tests/test_policy_libcachesim_mooncake.py`` to say where the two implementations
differ and by how much: with libCacheSim's rules (and exact counts instead of its counting
Bloom filter) the model reproduces libCacheSim's ``WTinyLFU`` within the filter's error; with
agentsim's rules it reproduces agentsim's ``w_tinylfu`` (flat mode) hit for hit; switching
one rule at a time attributes the gap. Written from libCacheSim's ``WTinyLFU.c`` and
``SLRU.c`` (window LRU of 1% in front of an SLRU main with segments 1:4) and from
``agentsim/cache/policies/w_tinylfu.py``.

Rules (``True`` = libCacheSim's):
* ``window_truncated``: window = int(C x 0.01) (agentsim rounds, at least 1);
* ``segments_capped``: the main's probation segment is capped at 20% and a newcomer goes to
  the lowest segment with room, so while probation is full new objects enter protected
  directly (agentsim: a newcomer always enters probation, only protected has a cap);
* ``compare_every_eviction``: every eviction takes the window's LRU object as the candidate,
  moving it to the main while the main has room (agentsim: a candidate only while the window
  is over its size, else the main's victim goes without a comparison);
* ``recount_candidate``: the candidate is counted again at every comparison (a "doorkeeper"
  placeholder in libCacheSim);
* ``count_main_hits_only``: hits in the window are not counted (agentsim counts every hit);
* ``decay_by_main_hits``: counts halve after 32 x main-size main hits (agentsim: after 10 x C
  counted accesses of any kind);
* ``unbounded_counts``: counters are not capped (agentsim's sketch has 4-bit counters, cap 15).
"""

from __future__ import annotations

from collections import OrderedDict

RULES = ("window_truncated", "segments_capped", "compare_every_eviction", "recount_candidate",
         "count_main_hits_only", "decay_by_main_hits", "unbounded_counts")
LIBCACHESIM = dict.fromkeys(RULES, True)
AGENTSIM = dict.fromkeys(RULES, False)


def w_tinylfu_hits(stream: list[int], capacity: int, rules: dict[str, bool]) -> int:
    """Hits of the model on a stream of unit-size object ids (exact counts, no sketch error)."""
    window_cap = int(capacity * 0.01) if rules["window_truncated"] else min(capacity, max(1, round(capacity * 0.01)))
    main_cap = capacity - window_cap
    probation_cap = int(main_cap * 0.2) if rules["segments_capped"] else None
    protected_cap = int(main_cap * 0.8)
    window: OrderedDict[int, None] = OrderedDict()
    probation: OrderedDict[int, None] = OrderedDict()
    protected: OrderedDict[int, None] = OrderedDict()
    counts: dict[int, int] = {}
    cap = None if rules["unbounded_counts"] else 15
    period = 32 * main_cap if rules["decay_by_main_hits"] else 10 * capacity
    ticks = 0

    def count(key: int, main_hit: bool = False) -> None:
        nonlocal counts, ticks
        value = counts.get(key, 0) + 1
        counts[key] = value if cap is None or value <= cap else cap
        if rules["decay_by_main_hits"] and not main_hit:
            return
        ticks += 1
        if ticks >= period:
            ticks = 0 if rules["decay_by_main_hits"] else ticks // 2
            counts = {k: v >> 1 for k, v in counts.items() if v >> 1}

    def main_insert(key: int) -> None:
        if probation_cap is not None and len(probation) + 1 > probation_cap and len(protected) + 1 <= protected_cap:
            protected[key] = None
        else:
            probation[key] = None

    def main_victim() -> int | None:
        return next(iter(probation)) if probation else next(iter(protected), None)

    def main_remove(key: int) -> None:
        if key in probation:
            del probation[key]
        else:
            del protected[key]

    def evict() -> None:
        if rules["compare_every_eviction"]:
            while window:
                candidate = next(iter(window))
                if len(probation) + len(protected) + 1 <= main_cap:
                    del window[candidate]
                    main_insert(candidate)
                    if rules["recount_candidate"]:
                        count(candidate)
                    continue
                victim = main_victim()
                if counts.get(candidate, 0) > counts.get(victim, 0):
                    main_remove(victim)
                    del window[candidate]
                    main_insert(candidate)
                else:
                    del window[candidate]
                if rules["recount_candidate"]:
                    count(candidate)
                return
            main_remove(main_victim())
            return
        while len(window) > window_cap:
            candidate = next(iter(window))
            if len(probation) + len(protected) + 1 <= main_cap:
                del window[candidate]
                main_insert(candidate)
                continue
            victim = main_victim()
            if victim is None:
                break
            if counts.get(candidate, 0) > counts.get(victim, 0):
                del window[candidate]
                main_insert(candidate)
                main_remove(victim)
            else:
                del window[candidate]
            return
        victim = main_victim()
        if victim is not None:
            main_remove(victim)
        else:
            window.popitem(last=False)

    hits = 0
    for key in stream:
        if key in window:
            hits += 1
            window.move_to_end(key)
            if not rules["count_main_hits_only"]:
                count(key)
            continue
        if key in probation or key in protected:
            hits += 1
            if key in protected:
                protected.move_to_end(key)
            else:
                del probation[key]
                protected[key] = None
                while len(protected) > protected_cap:
                    probation[protected.popitem(last=False)[0]] = None
            count(key, main_hit=True)
            continue
        while len(window) + len(probation) + len(protected) + 1 > capacity:
            evict()
        window[key] = None
        count(key)
    return hits
