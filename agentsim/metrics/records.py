"""Typed metric records. The simulation appends records; :mod:`agentsim.results` turns each list
into a long-form pandas DataFrame (one row per record, one column per field)."""

from __future__ import annotations

from dataclasses import dataclass, fields


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
    # Memory hierarchy (TTFT = queue_wait + load_wait + prefill; hit tokens by serving tier).
    load_wait_s: float = float("nan")
    prefill_s: float = float("nan")
    hit_tokens_hbm: int = 0
    hit_tokens_peer_hbm: int = 0
    hit_tokens_dram: int = 0
    hit_tokens_disk: int = 0
    hit_tokens_remote: int = 0
    loaded_bytes: float = 0.0


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


def columns(record_type) -> list[str]:
    return [f.name for f in fields(record_type)]
