"""Tool-gap movement (``cache.tiers.on_tool_call: demote``, ``prefetch_before_return``).

When a call ends in a tool or human pause, the agent's private HBM chain is swapped out to DRAM
right after its unpin, and ``return_lead_s`` before the pre-sampled return its below-HBM KV is
loaded back into HBM; the agent's next call waits for that load if it arrives first.

A :class:`ToolGapMover` uses of its instance: ``env``, ``cache`` (a
:class:`~agentsim.cache.tiers.TieredCache`), ``links``, ``block_bytes``, ``check_invariants``,
``tier_stats`` and ``wake()``.
"""

from __future__ import annotations

import simpy

from agentsim.cache.tiers import TieredCache
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.movement import below_hbm_segments, load_along_path


class ToolGapMover:
    """Demotes a pausing agent's KV and brings it back before the agent returns."""

    def __init__(self, host, demote: bool, return_prefetch: bool, return_lead_s: float):
        self.host = host
        self.demote = demote
        self.return_prefetch = return_prefetch
        self.return_lead_s = return_lead_s
        self._returning: dict[int, int] = {}          # agent id -> in-flight return prefetches
        self._held_for_return: set[int] = set()       # request ids counted in return_waits

    @property
    def holds(self) -> bool:
        """Whether some waiting requests may have to wait for their return prefetch."""
        return self.return_prefetch

    def ready(self, req: LLMRequest) -> bool:
        """False while the agent's own return prefetch is in flight (counted once per request)."""
        if self._returning and req.agent_id in self._returning:
            if req.request_id not in self._held_for_return:
                self._held_for_return.add(req.request_id)
                self.host.tier_stats["return_waits"] += 1
            return False
        return True

    def on_request_end(self, req: LLMRequest, node) -> None:
        """After ``req``'s unpin: act if the agent now pauses for a tool or a human."""
        if req.next_gap_kind in ("tool", "human") and req.agent_id >= 0:
            self._tool_gap(req, node)

    def _tool_gap(self, req: LLMRequest, node) -> None:
        """The agent pauses for ``req.next_gap_s``: swap its private KV out, schedule the return."""
        host = self.host
        gap = req.next_gap_s
        now = host.env.now
        if self.demote and not (self.return_prefetch and gap <= self.return_lead_s):
            host.tier_stats["tool_demoted_blocks"] += host.cache.swap_out_path(node, now)
        if self.return_prefetch and gap == gap:
            host.env.process(self._return_prefetch(req.agent_id, req.total_keys, max(0.0, gap - self.return_lead_s)))

    def _return_prefetch(self, agent_id: int, keys: list[int], delay_s: float):
        """Load the agent's below-HBM KV back into HBM ``delay_s`` from now (before its return)."""
        host = self.host
        env = host.env
        if delay_s > 0:
            yield env.timeout(delay_s)
        cache: TieredCache = host.cache
        now = env.now
        match = cache.match(keys, now, touch=False)
        hbm_node, hbm_blocks = cache.hbm_prefix(match.node)
        if match.hit_blocks <= hbm_blocks:
            return
        segments = below_hbm_segments(cache, hbm_node, match.node)
        if not segments or segments[0][0] is None:
            return
        deepest = segments[-1][2]
        n_blocks = cache.begin_load(deepest)
        cache.pin(deepest)
        if not cache.reserve(n_blocks, now):
            cache.unpin(deepest)
            cache.cancel_load(deepest)
            host.tier_stats["return_prefetch_failed"] += 1
            return
        self._returning[agent_id] = self._returning.get(agent_id, 0) + 1
        host.tier_stats["return_prefetches"] += 1
        procs = [env.process(load_along_path(host.links, cache.tiers[src].name, blocks * host.block_bytes))
                 for src, blocks, _ in segments]
        yield simpy.AllOf(env, procs)
        cache.finish_load(deepest, n_blocks, env.now)
        cache.unpin(deepest)
        host.tier_stats["return_prefetched_blocks"] += n_blocks
        left = self._returning[agent_id] - 1
        if left:
            self._returning[agent_id] = left
        else:
            del self._returning[agent_id]
        if host.check_invariants:
            cache.check_invariants()
        host.wake()
