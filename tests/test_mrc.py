"""One-pass hit-ratio curve: exact against per-capacity cache-only replays and a naive LRU."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentsim.replay import canonicalize, hit_ratio_curve, replay_cache_only, stack_distances
from agentsim.replay.mrc import distance_histogram
from tests.conftest import run_cli
from tests.test_replay import (
    FIXTURES, MOONCAKE_REFERENCE, make_request, mooncake_requests, naive_lru_hits, random_prefix_trace,  # noqa: F401
)


def test_stack_distances_hand_example():
    # Stream per request deepest first: [2,1] [3,2,1] [4] [3,2,1]
    requests = [make_request(0, [1, 2]), make_request(1, [1, 2, 3]), make_request(2, [4]), make_request(3, [1, 2, 3])]
    d = stack_distances(canonicalize(requests))
    # Before request 1 the stack is (1, 2): block 1 at 1, block 2 at 2, block 3 new.
    # Before request 3 the stack is (4, 1, 2, 3).
    assert d.tolist() == [0, 0, 1, 2, 0, 0, 2, 3, 4]


@pytest.mark.parametrize("seed", range(8))
def test_segment_histogram_equals_per_reference_distances(seed):
    # Two independent algorithms (segments + Fenwick over requests; flat stream + dominance counts).
    canonical = canonicalize(random_prefix_trace(seed, 150))
    reference = np.bincount(stack_distances(canonical), minlength=canonical.unique_blocks + 1)
    assert np.array_equal(distance_histogram(canonical), reference)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_curve_matches_replays_and_naive_lru_at_every_capacity(seed):
    requests = random_prefix_trace(seed, 100)
    canonical = canonicalize(requests)
    curve = hit_ratio_curve(canonical)
    assert curve.unique_blocks == canonical.unique_blocks
    assert curve.hits(canonical.unique_blocks) == canonical.ideal_hit_blocks
    for capacity in range(1, canonical.unique_blocks + 1, max(1, canonical.unique_blocks // 25)):
        replay = replay_cache_only(requests, capacity_blocks=capacity, canonical=canonical)
        assert curve.hits(capacity) == replay.hit_blocks == naive_lru_hits(requests, capacity), capacity


def test_curve_is_monotone_and_handles_non_prefix_ids():
    # The same id under different parents is a different block (canonical ids intern the path).
    requests = [make_request(0, [1, 2]), make_request(1, [3, 2]), make_request(2, [1, 2]), make_request(3, [3, 2])]
    canonical = canonicalize(requests)
    assert canonical.unique_blocks == 4
    curve = hit_ratio_curve(canonical)
    assert np.all(np.diff(curve.hits_at) >= 0)
    for capacity in range(1, 5):
        assert curve.hits(capacity) == replay_cache_only(requests, capacity_blocks=capacity).hit_blocks
    assert curve.hits(4) == 4 and curve.hits(3) == 2  # block (3,2) evicted once, (1,2) once


def test_mooncake_curve_equals_five_replays(mooncake_requests):  # noqa: F811
    canonical = canonicalize(mooncake_requests)
    curve = hit_ratio_curve(canonical)
    reference = np.bincount(stack_distances(canonical), minlength=canonical.unique_blocks + 1)
    assert np.array_equal(distance_histogram(canonical), reference)
    assert curve.ideal_hit_ratio == pytest.approx(0.366, abs=0.0005)
    for fraction, expected in MOONCAKE_REFERENCE.items():
        replay = replay_cache_only(mooncake_requests, capacity_fraction=fraction, canonical=canonical)
        assert curve.hits(replay.capacity_blocks) == replay.hit_blocks
        assert curve.hit_ratio(replay.capacity_blocks) == pytest.approx(expected, abs=0.005)


def test_cli_mrc_json_and_out(tmp_path):
    out = tmp_path / "m"
    proc = run_cli("mrc", str(FIXTURES / "mooncake_head40.jsonl"), "--fractions", "0.1,0.5,1", "--json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [row["fraction"] for row in rows] == [0.1, 0.5, 1.0]
    from agentsim.workload.traces import load_requests
    requests = load_requests(FIXTURES / "mooncake_head40.jsonl")
    for row in rows:
        assert set(row) == {"fraction", "capacity_blocks", "hit_ratio"}
        replay = replay_cache_only(requests, capacity_blocks=row["capacity_blocks"])
        assert row["hit_ratio"] == pytest.approx(replay.hit_ratio)
    meta = json.loads((out / "mrc.json").read_text())
    assert meta["points"] == rows
    assert (out / "curve.csv").read_text().startswith("capacity_blocks,capacity_fraction,hit_ratio\n")


@pytest.mark.parametrize("fractions, message", [("0.1,x", "not a number"), ("0,0.5", "must be positive"), (",", "no fractions")])
def test_cli_mrc_bad_fractions(fractions, message):
    proc = run_cli("mrc", str(FIXTURES / "mooncake_head40.jsonl"), "--fractions", fractions)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_canonical_fast_path_equals_interning():
    from agentsim.replay.prefix import _intern

    requests = random_prefix_trace(9, 200)
    fast = canonicalize(requests)
    slow = _intern(requests, fast.starts)
    assert np.array_equal(fast.ids, slow.ids)
    assert (fast.unique_blocks, fast.ideal_hit_blocks) == (slow.unique_blocks, slow.ideal_hit_blocks)
