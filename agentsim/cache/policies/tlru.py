"""Tail-optimized LRU, T-LRU (Zhang et al., arXiv 2510.15152; policies spec sections 2.2 and 4.8).

Per branch, L = its high-water depth in blocks (the deepest end any request reached below the
node; it does not shrink when the tail is trimmed). Its next TTFT stays within the latency
threshold xi if at least ``budget = max(L + q_hat - xi, 0)`` blocks of history stay cached;
a block at position p >= budget is "TEL-safe" and cannot improve the tail. T-LRU evicts
TEL-safe blocks first in LRU order, then falls back to plain LRU. Key
``(0 if the run's deepest block is TEL-safe else 1, last_access_s, deepest first)``; a run
straddling the budget is split at it when chosen, so only TEL-safe blocks go in phase 1.
``threshold_blocks = next_prompt_blocks = 0`` is exactly ``lru``. Parameters are in blocks
(the engine converts the paper's tokens with the block size). [sim-choice] For agentic
traces q_hat is a constant per run (the spec suggests a per-tool prediction later).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policy import KeyedLeafPolicy


class TLRUParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threshold_blocks: int = Field(0, ge=0, description="xi: uncached blocks whose prefill still meets the TTFT target")
    next_prompt_blocks: int = Field(0, ge=0, description="q_hat: predicted blocks of the next prompt")


@EVICTION_POLICIES.register("tlru")
class TLRU(KeyedLeafPolicy):
    """TEL-safe blocks first (LRU among them), then LRU."""

    Params = TLRUParams
    merge_runs = False
    # A partly evicted leaf keeps its high-water mark and is re-keyed, as the split's upper
    # part would be; the renewed node id keeps the split's tie-break.
    trim_in_place = True
    trim_renews_id = True

    def __init__(self, params=None):
        super().__init__(params)
        self._last = None  # previous node of the current path-touch (deepest first)
        self._slack = self.params.next_prompt_blocks - self.params.threshold_blocks

    def _budget(self, node) -> int:
        return max((node.policy_data or node.end_block) + self._slack, 0)

    def key(self, node):
        # _budget and end_block inlined: the key is computed for every push.
        end = node.start_block + len(node.keys)
        budget = (node.policy_data or end) + self._slack
        safe = end - 1 >= (budget if budget > 0 else 0)
        return (0 if safe else 1, node.last_access_s, -end)

    def on_insert(self, node, now_s):
        node.policy_data = node.end_block
        self._last = None
        super().on_insert(node, now_s)

    def on_access(self, node, now_s, hit=False):
        high = node.policy_data or 0
        end = node.start_block + len(node.keys)
        if end > high:
            high = end
        last = self._last
        if last is not None and last.parent is node:
            below = last.policy_data
            if below is not None and below > high:
                high = below  # carry the branch's high-water mark up the path
        node.policy_data = high
        self._last = node
        self._push_if_evictable(node)  # KeyedLeafPolicy.on_access, without its frame

    def on_split(self, upper, lower):
        upper.policy_data = lower.policy_data
        super().on_split(upper, lower)

    def pop_victim(self, now_s):
        node = super().pop_victim(now_s)
        if node is None or self._slack >= 0 and self.params.threshold_blocks == 0:
            return node
        budget = self._budget(node)
        if node.start_block < budget < node.end_block and node.end_block - 1 >= budget:
            # Only the blocks at positions >= budget are TEL-safe: trim those in phase 1.
            self.cache.split(node, budget - node.start_block)
            node.heap_version += 1
        return node
