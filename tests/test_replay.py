"""Cache-only replay: hit-ratio definition, exactness against a naive block LRU, all policies,
the Mooncake golden numbers, and the ``agentsim replay`` command."""

from __future__ import annotations

import json
from array import array
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.errors import InputError
from agentsim.replay import canonicalize, replay_cache_only
from agentsim.workload.traces import TraceRequest, load_requests
from tests.conftest import SHARED_DATA, run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
MOONCAKE_FULL = SHARED_DATA / "mooncake" / "conversation_trace.jsonl.gz"


def make_request(i: int, keys, block_tokens: int = 16, input_tokens: int | None = None) -> TraceRequest:
    keys = list(keys)
    return TraceRequest(index=i, timestamp_s=float(i), session_id="s", input_tokens=input_tokens or len(keys) * block_tokens,
                        output_tokens=1, block_keys=array("q", keys), block_tokens=block_tokens)


def random_prefix_trace(seed: int, n_requests: int = 120) -> list[TraceRequest]:
    """Requests that extend, branch from or truncate earlier ones (prefix keys, shared prefixes)."""
    rng = np.random.default_rng(seed)
    next_key = 1
    out: list[TraceRequest] = []
    for i in range(n_requests):
        if out and rng.random() < 0.75:
            base = list(out[int(rng.integers(len(out)))].block_keys)
            base = base[: int(rng.integers(0, len(base) + 1))]
        else:
            base = []
        extra = int(rng.integers(0 if base else 1, 8))
        keys = base + list(range(next_key, next_key + extra))
        next_key += extra
        out.append(make_request(i, keys))
    return out


def naive_lru_hits(requests: list[TraceRequest], capacity: int) -> int:
    """Reference: OrderedDict block LRU, longest-prefix hits, a request's blocks touched deepest
    first (so among one request's blocks the deepest is evicted first)."""
    lru: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for request in requests:
        keys = list(request.block_keys)
        h = 0
        while h < len(keys) and keys[h] in lru:
            h += 1
        hits += h
        for key in reversed(keys):
            lru[key] = None
            lru.move_to_end(key)
        while len(lru) > capacity:
            lru.popitem(last=False)
    return hits


def test_hand_computed_lru_example():
    # capacity 3: [1,2] miss 2; [1,2,3] hits 2; [4] evicts deepest-oldest 3; [1,2,3] hits 2.
    requests = [make_request(0, [1, 2]), make_request(1, [1, 2, 3]), make_request(2, [4]), make_request(3, [1, 2, 3])]
    result = replay_cache_only(requests, capacity_blocks=3, record_requests=True, check_invariants=True)
    assert result.request_hit_blocks == [0, 2, 0, 2]
    assert result.hit_blocks == 4 and result.requested_blocks == 9
    assert result.hit_ratio == pytest.approx(4 / 9)
    assert result.unique_blocks == 4 and result.ideal_hit_blocks == 5
    assert result.ideal_hit_ratio == pytest.approx(5 / 9)


def test_token_hit_ratio_caps_partial_last_block():
    # 16-token blocks; 40 input tokens = 3 blocks, the last one partial (8 tokens).
    requests = [make_request(0, [1, 2, 3], input_tokens=40), make_request(1, [1, 2, 3], input_tokens=40)]
    result = replay_cache_only(requests, capacity_blocks=10)
    assert result.hit_blocks == 3 and result.hit_tokens == 40 and result.input_tokens == 80
    assert result.token_hit_ratio == pytest.approx(0.5)


def test_request_longer_than_cache_keeps_its_first_blocks():
    requests = [make_request(0, range(1, 11)), make_request(1, range(1, 11))]
    result = replay_cache_only(requests, capacity_blocks=4, record_requests=True, check_invariants=True)
    assert result.request_hit_blocks == [0, 4]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lru_replay_equals_naive_block_lru(seed):
    requests = random_prefix_trace(seed)
    canonical = canonicalize(requests)
    for capacity in (1, 3, 7, 20, 50, canonical.unique_blocks):
        result = replay_cache_only(requests, capacity_blocks=capacity, canonical=canonical, check_invariants=True)
        assert result.hit_blocks == naive_lru_hits(requests, capacity), capacity


@pytest.mark.parametrize("policy", EVICTION_POLICIES.names())
def test_every_policy_replays_within_bounds(policy):
    requests = random_prefix_trace(11, 150)
    canonical = canonicalize(requests)
    result = replay_cache_only(requests, capacity_blocks=15, policy=policy, canonical=canonical,
                               check_invariants=True, record_requests=True)
    assert 0 <= result.hit_blocks <= canonical.ideal_hit_blocks
    assert all(0 <= h <= len(r.block_keys) for h, r in zip(result.request_hit_blocks, requests))
    assert sum(result.request_hit_blocks) == result.hit_blocks
    # A cache holding every block never evicts: every policy reaches the ideal hit ratio.
    big = replay_cache_only(requests, capacity_blocks=canonical.unique_blocks, policy=policy, canonical=canonical)
    assert big.hit_blocks == canonical.ideal_hit_blocks and big.evicted_blocks == 0


def test_capacity_arguments():
    requests = random_prefix_trace(5)
    unique = canonicalize(requests).unique_blocks
    assert replay_cache_only(requests, capacity_fraction=0.5).capacity_blocks == round(0.5 * unique)
    assert replay_cache_only(requests).capacity_blocks == round(0.1 * unique)
    with pytest.raises(InputError, match="not both"):
        replay_cache_only(requests, capacity_blocks=3, capacity_fraction=0.1)
    with pytest.raises(InputError, match="must be positive"):
        replay_cache_only(requests, capacity_blocks=0)
    with pytest.raises(InputError, match="did you mean 'lru'"):
        replay_cache_only(requests, capacity_blocks=3, policy="lur")


def test_trace_clock_uses_timestamps():
    requests = random_prefix_trace(4)
    logical = replay_cache_only(requests, capacity_blocks=10)
    trace = replay_cache_only(requests, capacity_blocks=10, clock="trace")
    # Timestamps here are distinct and increasing: both clocks order accesses identically.
    assert trace.hit_blocks == logical.hit_blocks and trace.clock == "trace"


# --- golden numbers --------------------------------------------------------------------------
MOONCAKE_REFERENCE = {0.01: 0.052, 0.05: 0.195, 0.10: 0.278, 0.25: 0.353, 0.50: 0.363}


@pytest.fixture(scope="module")
def mooncake_requests():
    if not MOONCAKE_FULL.exists():
        pytest.skip(f"needs the whole Mooncake trace (12,031 requests) at {MOONCAKE_FULL}")
    return load_requests(MOONCAKE_FULL)


def test_mooncake_golden_numbers(mooncake_requests):
    requests = mooncake_requests
    assert len(requests) == 12031
    canonical = canonicalize(requests)
    assert canonical.unique_blocks == 182_790
    assert canonical.ideal_hit_blocks / canonical.requested_blocks == pytest.approx(0.366, abs=0.0005)
    for fraction, expected in MOONCAKE_REFERENCE.items():
        result = replay_cache_only(requests, capacity_fraction=fraction, canonical=canonical)
        assert result.hit_ratio == pytest.approx(expected, abs=0.005), fraction
    avg_input = sum(r.input_tokens for r in requests) / len(requests)
    assert avg_input == pytest.approx(12035, abs=1)  # paper, Table 2


# --- command line ----------------------------------------------------------------------------
def test_cli_replay_json_keys():
    proc = run_cli("replay", str(FIXTURES / "mooncake_head40.jsonl"), "--capacity-blocks", "50", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    for key in ("requests", "unique_blocks", "ideal_hit_ratio", "hit_ratio", "capacity_blocks", "policy"):
        assert key in summary
    requests = load_requests(FIXTURES / "mooncake_head40.jsonl")
    expected = replay_cache_only(requests, capacity_blocks=50)
    assert summary["requests"] == 40 and summary["capacity_blocks"] == 50 and summary["policy"] == "lru"
    assert summary["hit_ratio"] == pytest.approx(expected.hit_ratio)


def test_cli_replay_weka_reblocked_with_out(tmp_path):
    import pandas as pd

    out = tmp_path / "r"
    proc = run_cli("replay", str(FIXTURES / "weka_trace_0014_excerpt.json.gz"), "--block-size", "512",
                   "--capacity-fraction", "0.5", "--policy", "fifo", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "hit ratio" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["block_tokens"] == 512 and summary["policy"] == "fifo" and summary["format"] == "weka"
    table = pd.read_parquet(out / "requests.parquet")
    assert len(table) == 9 and table["hit_blocks"].sum() == summary["hit_blocks"]


def test_cli_replay_bound_is_above_every_policy_and_belady():
    """``--bound``: the hit ratio no policy can exceed (agentsim.cache.hit_bound) beside the policy's."""
    trace = FIXTURES / "mooncake_head1200.jsonl.gz"
    bounds = set()
    for policy in ("lru", "belady", "s3fifo"):
        proc = run_cli("replay", str(trace), "--capacity-blocks", "400", "--policy", policy, "--bound", "--json")
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout)
        assert summary["hit_ratio"] <= summary["upper_bound_hit_ratio"] <= summary["ideal_hit_ratio"]
        assert summary["upper_bound_headroom"] == pytest.approx(summary["upper_bound_hit_ratio"] - summary["hit_ratio"])
        bounds.add(summary["upper_bound_hit_blocks"])
    assert len(bounds) == 1  # a property of the trace and the capacity, not of the policy
    plain = json.loads(run_cli("replay", str(trace), "--capacity-blocks", "400", "--json").stdout)
    assert "upper_bound_hit_ratio" not in plain


@pytest.mark.parametrize("args, message", [
    (["--mode", "open-loop", "--bound"], "--bound applies to the cache-only mode"),
    (["--policy", "lur"], "did you mean 'lru'"),
    (["--format", "mooncak"], "did you mean 'mooncake'"),
    (["--mode", "closed"], "did you mean 'closed-loop'"),
    (["--capacity-blocks", "5", "--capacity-fraction", "0.1"], "not both"),
])
def test_cli_replay_bad_options_exit_2(args, message):
    proc = run_cli("replay", str(FIXTURES / "mooncake_head40.jsonl"), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_cli_replay_bad_trace_exit_2_one_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(FIXTURES.joinpath("mooncake_head40.jsonl").read_text() + "{oops\n")
    proc = run_cli("replay", str(path))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "line 41" in proc.stderr and "Traceback" not in proc.stderr


# --- policy hooks: timers and the future -------------------------------------------------------
def test_ttl_policy_expires_on_trace_clock():
    keys = list(range(1, 6))
    requests = [make_request(0, keys), make_request(1, keys)]
    requests[1].timestamp_s = 1000.0  # a 1000 s gap, beyond a 5-minute TTL
    lru = replay_cache_only(requests, capacity_blocks=100, policy="lru")
    ttl = replay_cache_only(requests, capacity_blocks=100, policy="ttl_5m")
    assert lru.hit_blocks == 5
    assert ttl.clock == "trace" and ttl.hit_blocks == 0
    assert ttl.summary()["ttl_expirations_blocks"] == 5
    requests[1].timestamp_s = 100.0  # within the TTL
    assert replay_cache_only(requests, capacity_blocks=100, policy="ttl_5m").hit_blocks == 5


@pytest.mark.parametrize("seed", [1, 2])
def test_belady_gets_the_future_and_beats_lru(seed):
    requests = random_prefix_trace(seed, 150)
    canonical = canonicalize(requests)
    for capacity in (5, 15, 40):
        lru = replay_cache_only(requests, capacity_blocks=capacity, canonical=canonical)
        opt = replay_cache_only(requests, capacity_blocks=capacity, policy="belady", canonical=canonical,
                                check_invariants=True)
        assert opt.hit_blocks >= lru.hit_blocks
    # With the future, Belady must strictly beat LRU somewhere on this trace.
    assert any(replay_cache_only(requests, capacity_blocks=c, policy="belady", canonical=canonical).hit_blocks
               > replay_cache_only(requests, capacity_blocks=c, canonical=canonical).hit_blocks for c in (5, 15, 40))


def test_cli_replay_scenario_only_for_timed_modes(tmp_path):
    proc = run_cli("replay", str(FIXTURES / "mooncake_head40.jsonl"), "--set", "seed=3")
    assert proc.returncode == 2 and "timed modes" in proc.stderr


def test_cli_replay_warns_about_unsorted_timestamps(tmp_path):
    lines = FIXTURES.joinpath("mooncake_head40.jsonl").read_text().splitlines()
    path = tmp_path / "unsorted.jsonl"
    path.write_text("\n".join([lines[30], *lines[:30], *lines[31:]]) + "\n")  # a 9000 ms line first
    proc = run_cli("replay", str(path), "--capacity-blocks", "50", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("warning: ") and "timestamps decrease" in proc.stderr
    assert json.loads(proc.stdout)["requests"] == 40
