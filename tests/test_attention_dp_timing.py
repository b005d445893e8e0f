"""Attention data parallelism: a prefilling sequence runs on one rank, so a step with prefill
chunks takes its busiest rank's time, and the instance's token budget is the engine's per rank."""

from __future__ import annotations

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.hardware.timing.interp import geometric_grid
from agentsim.hardware.timing.tables import StepTables
from agentsim.hardware.timing.tabulated import TabulatedTimer

# Linear tables: 1 ms + 10 us per token outside attention; a chunk's attention 1 us per new
# token per 1,000 tokens of context after it (new * (context + new) / 1e9 s).
_TOKENS = geometric_grid(1, 100_000, 8)
_NEWS = geometric_grid(1, 16_384, 8)
_CONTEXTS = [0] + geometric_grid(1, 65_536, 8)
_BATCHES = geometric_grid(1, 256, 8)


def _tables() -> StepTables:
    return StepTables(
        tokens=_TOKENS, news=_NEWS, contexts=_CONTEXTS, batches=_BATCHES,
        non_attention_s=[1e-3 + 1e-5 * t for t in _TOKENS],
        chunk_attention_s=[[n * (c + n) / 1e9 for c in _CONTEXTS] for n in _NEWS],
        decode_attention_s=[[1e-6 * b * (1 + c / 1000) for c in _CONTEXTS] for b in _BATCHES],
        decode_s=[[5e-3 + 1e-5 * b for _ in _CONTEXTS] for b in _BATCHES], provenance="test")


def _timer(dp: int) -> TabulatedTimer:
    return TabulatedTimer(_tables(), kv_bytes_per_token=1000, chunk_tokens=8192, attention_dp=dp)


def _one_rank_s(*chunks: tuple[int, int]) -> float:
    """What one rank holding ``chunks`` takes: the tables at the rank's tokens and chunks."""
    return _timer(1).iteration_s(chunks, 0, 0.0)


def test_one_prompt_on_a_dp_worker_takes_one_rank_the_whole_prompt():
    one = _one_rank_s((8192, 0))
    assert _timer(4).iteration_s(((8192, 0),), 0, 0.0) == pytest.approx(one)
    assert one == pytest.approx(1e-3 + 1e-5 * 8192 + 8192 * 8192 / 1e9, rel=0.02)   # the tables' formulas
    # Spread evenly (2,048 tokens a rank) it would be over 3x faster: not what an engine does.
    assert one > 3 * _one_rank_s((2048, 0))


def test_chunks_are_placed_longest_first_on_the_least_loaded_rank():
    chunks = ((1000, 0), (4000, 0), (2000, 0), (3000, 0))
    # Two ranks: 4000 + 1000 and 3000 + 2000 tokens; the step is the slower rank's.
    expected = max(_one_rank_s((4000, 0), (1000, 0)), _one_rank_s((3000, 0), (2000, 0)))
    assert _timer(2).iteration_s(chunks, 0, 0.0) == pytest.approx(expected, rel=1e-3)
    # Four ranks: one chunk each, the 4000-token one is the busiest.
    assert _timer(4).iteration_s(chunks, 0, 0.0) == pytest.approx(_one_rank_s((4000, 0)), rel=1e-3)
    # Balanced chunks time as before: the same on every rank.
    even = ((2048, 0),) * 4
    assert _timer(4).iteration_s(even, 0, 0.0) == pytest.approx(_timer(1).iteration_s(((2048, 0),), 0, 0.0))


def test_decoding_sequences_stay_spread_over_the_ranks():
    # 64 decoding sequences on 4 ranks: 16 tokens a rank beside the prefill chunk.
    timer = _timer(4)
    got = timer.iteration_s(((1024, 0),), 64, 64 * 2000.0)
    expected = timer._non_attention(1024 + 16) + timer._chunk(1024, 0) + timer._decode_attention(16, 2000.0)
    assert got == pytest.approx(expected)
    # All 64 on the prefilling rank would be slower.
    assert got < timer._non_attention(1024 + 64) + timer._chunk(1024, 0) + timer._decode_attention(64, 2000.0)


def _serving(dp: int, **serving):
    return scenario_from_dict({
        "name": "t", "seed": 1, "duration_s": 10,
        "hardware": {"profile": "gb200_nvl72", "gpus_per_instance": 4},
        "model": {"profile": "deepseek_v3"},
        "serving": {"engine": "trtllm", "parallelism": {"tp": 4 // dp, "attention_dp": dp}, **serving},
        "workload": {"agent_classes": {"c": {"arrival": {"kind": "population", "concurrent": 1},
                                             "max_context_tokens": 8192, "tools_prefix_tokens": 0}}}}).serving


def test_the_token_budget_is_per_attention_dp_rank():
    dp4 = _serving(4, max_num_batched_tokens=2048)
    assert (dp4.batch_tokens(), dp4.instance_batch_tokens(), dp4.rank_chunk_tokens()) == (2048, 8192, 2048)
    tp4 = _serving(1, max_num_batched_tokens=2048)
    assert (tp4.instance_batch_tokens(), tp4.rank_chunk_tokens()) == (2048, None)
