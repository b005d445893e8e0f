"""Cross-check against libCacheSim (spec section 6, P5) on a flat block stream.

The stream is the first 1,200 requests of the Mooncake conversation trace (Apache-2.0; copied
to tests/fixtures/traces/mooncake_head1200.jsonl.gz, see the README there) flattened block by block, each request's blocks deepest first; every block is a one-block request, so
the tree is flat, nothing is pinned across requests and each policy's core algorithm is
compared hit for hit. Skipped when the ``libcachesim`` package (test extra) is not installed.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.sequential import replay_sequence as replay
from agentsim.cache.radix import RadixCache

lcs = pytest.importorskip("libcachesim")

TRACE = Path(__file__).resolve().parent / "fixtures" / "traces" / "mooncake_head1200.jsonl.gz"
N_REQUESTS = 1200


@pytest.fixture(scope="module")
def stream():
    blocks = []
    with gzip.open(TRACE, "rt") as f:
        for i, line in enumerate(f):
            if i >= N_REQUESTS:
                break
            blocks.extend(reversed(json.loads(line)["hash_ids"]))
    return blocks


def _theirs(cache, stream):
    hits = 0
    for key in stream:
        req = lcs.Request()
        req.obj_id = key
        req.obj_size = 1
        hits += bool(cache.get(req))
    return hits


def _ours(name, params, capacity, stream):
    policy = EVICTION_POLICIES.get(name)(EVICTION_POLICIES.validate_params(name, params))
    return replay(RadixCache(capacity, policy), [[k] for k in stream]).hit_blocks


CASES = [
    ("lru", {}, lambda c: lcs.LRU(c), 0),
    ("fifo", {"tree_mode": "flat"}, lambda c: lcs.FIFO(c), 0),
    ("lfu", {}, lambda c: lcs.LFU(c), 0),
    ("sieve", {"tree_mode": "flat"}, lambda c: lcs.Sieve(c), 0),
    ("s3fifo", {"tree_mode": "flat", "move_to_main_threshold": 2}, lambda c: lcs.S3FIFO(c, move_to_main_threshold=2), 0),
    ("twoq", {"tree_mode": "flat"}, lambda c: lcs.TwoQ(c), 0),
    ("vllm_lru", {}, lambda c: lcs.LRU(c), 0),
    # ARC: exact at small sizes; at larger ones a residual 0.14 pp difference remains from the
    # REPLACE-before-insert ordering (we evict before inserting; see arc.py). Bound: 0.5 pp.
    ("arc", {"tree_mode": "flat"}, lambda c: lcs.ARC(c), 0.005),
]


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.01, 0.05, 0.1])
@pytest.mark.parametrize("name,params,make_theirs,tolerance", CASES, ids=[c[0] for c in CASES])
def test_hits_match_libcachesim(stream, fraction, name, params, make_theirs, tolerance):
    capacity = max(2, int(len(set(stream)) * fraction))
    theirs = _theirs(make_theirs(capacity), stream)
    ours = _ours(name, params, capacity, stream)
    if tolerance == 0:
        assert ours == theirs
    else:
        assert abs(ours - theirs) / len(stream) <= tolerance, (ours, theirs)
