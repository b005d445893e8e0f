"""W-TinyLFU on prefix workloads (issue 22 item 7): the window keeps its size in leaf_only mode,
and the sketch resets after block accesses, not run accesses."""

from __future__ import annotations

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policies._sketch import FrequencySketch
from agentsim.cache.radix import RadixCache
from agentsim.cache.sequential import replay_sequence


def _agent_turns(turns: int, grow: int) -> list[list[int]]:
    """One agent re-sending its history: turn t's prompt is every block so far plus ``grow`` new."""
    history: list[int] = []
    prompts = []
    for t in range(turns):
        history = history + list(range(1000 + t * grow, 1000 + (t + 1) * grow))
        prompts.append(list(history))
    return prompts


def test_the_window_passes_runs_that_newer_runs_extend_to_the_main_and_keeps_its_size():
    prompts = _agent_turns(turns=40, grow=10)
    policy = EVICTION_POLICIES.get("w_tinylfu")()
    cache = RadixCache(1000, policy)
    sizes = []
    replay_sequence(cache, prompts, after_request=lambda _i: sizes.append(policy.window.blocks))
    # The window (1% of 1,000 = 10 blocks) holds the newest run only; before, every extended
    # run stayed in it (no leaf, never a candidate) and it grew to the whole history.
    assert max(sizes) <= policy.window_cap + 10
    lru = replay_sequence(RadixCache(1000, EVICTION_POLICIES.get("lru")()), prompts).hit_blocks
    assert replay_sequence(RadixCache(1000, EVICTION_POLICIES.get("w_tinylfu")()), prompts).hit_blocks == lru


def test_the_window_rule_is_leaf_only():
    """In flat mode every unpinned member can leave the window, so runs stay where they are."""
    prompts = _agent_turns(turns=5, grow=10)
    policy = EVICTION_POLICIES.get("w_tinylfu")(EVICTION_POLICIES.validate_params("w_tinylfu", {"tree_mode": "flat"}))
    cache = RadixCache(1000, policy)
    replay_sequence(cache, prompts)
    assert policy.probation.blocks == 0 and policy.window.blocks == 50


def test_the_sketch_resets_after_block_accesses():
    sketch = FrequencySketch(width=64, sample_size=1000)
    for _ in range(9):
        sketch.increment(7, 1, 100)  # a run of 100 blocks accessed: 100 block accesses
    assert sketch.resets == 0 and sketch.estimate(7) == 9
    sketch.increment(7, 1, 100)
    assert sketch.resets == 1 and sketch.estimate(7) == 5
    sketch.increment(8, sketch.estimate(7), 0)  # a copied count is no access
    assert sketch.additions == 500 and sketch.estimate(8) == 5


def test_w_tinylfu_counts_a_run_access_as_its_blocks():
    prompts = _agent_turns(turns=30, grow=50)
    policy = EVICTION_POLICIES.get("w_tinylfu")()
    replay_sequence(RadixCache(200, policy), prompts)
    # Block accesses: 50 new blocks per insert and every hit run's blocks; the sample is 10 x 200.
    assert policy.sketch.resets >= 1


def test_the_sketch_of_a_huge_capacity_is_bounded_and_byte_sized():
    """A capacity of 2^32 blocks (the per-tier limit) used to allocate 4 x 2^32 list slots
    (137 GB) before the first request; rows are bytes now and at most MAX_WIDTH wide."""
    import tracemalloc

    from agentsim.cache.policies._sketch import MAX_WIDTH

    tracemalloc.start()
    sketch = FrequencySketch(width=2**32, sample_size=10 * 2**32)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sketch.width == MAX_WIDTH and peak < 4 * MAX_WIDTH + 2**20
    for _ in range(20):
        sketch.increment(12345)
    assert sketch.estimate(12345) == 15                       # saturating 4-bit counters, as before


def test_a_small_sketch_halves_at_its_sample_size():
    sketch = FrequencySketch(width=64, sample_size=8)
    for _ in range(7):
        sketch.increment(7)
    assert sketch.estimate(7) == 7
    sketch.increment(7)                                       # the 8th access: every counter halved
    assert sketch.estimate(7) == 4 and sketch.resets == 1


def test_replay_at_the_block_limit_runs_in_two_gib(tmp_path):
    from tests.conftest import run_cli

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}\n')
    proc = run_cli("replay", str(trace), "--json", "--capacity-blocks", str(2**32), "--policy", "w_tinylfu",
                   max_memory_bytes=2 * 1024**3)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
