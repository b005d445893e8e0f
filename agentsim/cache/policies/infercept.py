"""InferCept (policies spec section 4.2; Abhyankar et al., ICML'24): preserve, swap or discard per pause.

At every pause (``on_tool_start``) of an agent whose context is ``C`` blocks, choose the action
with the least GPU memory waste (block-seconds; bytes per block cancel out):

| action   | waste                                                  |
|----------|--------------------------------------------------------|
| preserve | ``T_INT * C``: the KV sits idle for the pause           |
| discard  | ``T_fwd(C) * C`` (+ ``T_fwd(C) * C_other`` without chunked recompute) |
| swap     | ``2 * T_swap(C) * C_batch`` (out and back in stall the batch) |

with ``T_fwd(C) = C * recompute_s_per_block``, ``T_swap(C) = C * swap_s_per_block``,
``C_other = C_batch`` = the cache's other used blocks at that moment, and ``T_INT`` the running
mean of past pauses of that kind (``tool``/``human``; cold start ``cold_start_mean_s``), or the
agent's own pre-sampled pause with ``oracle: true``.

Radix mapping:
* **preserve** = TTL-pin with tau = inf, released at tool end (pressure unpin still applies,
  so the cache can never deadlock);
* **swap** = the paused agent's private chain (from its deepest node up to the first shared or
  pinned node) is demoted out of HBM right after the request's unpin, through the tiered
  cache's ``demote_path`` (eviction reason ``tool_demote``), so it is loaded back (or
  recomputed) at the next call. Swap needs a lower tier: in an HBM-only cache it is never
  chosen (documented limitation; use ``cache.tiers`` for it);
* **discard** ``soft`` (default in prefix caches): the private chain stays cached but is
  evicted first (before any base-policy victim) unless it is used again; ``strict``: it is
  freed at once (eviction reason ``tool_discard``; HBM-only cache). With
  ``discard_priority: false`` a soft discard is a plain unpin, which reproduces the base policy
  (the spec's "soft-discard-always == base" reduction).

The post-unpin work (swap, strict discard) runs from the policy timer at the pause's own
instant (the engine calls ``on_timer`` once the finishing request's unpin is done).
[sim-choice] Decisions are made once per pause (no per-iteration re-evaluation or swap budget);
InferCept's FCFS by original arrival is not modelled.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policy import KeyedLeafPolicy
from agentsim.cache.policies.ttl_pin import PinWrapper, PinWrapperParams, _node


class InferCeptParams(PinWrapperParams):
    pin_tools: list[str] = Field(default_factory=lambda: ["tool", "human"],
                                 description="pause kinds handled (tool, human); others are plain unpins")
    recompute_s_per_block: float = Field(1e-3, gt=0, description="T_fwd per block of context (s)")
    swap_s_per_block: float = Field(2.5e-5, gt=0, description="T_swap per block one way (s): 64 x 35 KB over ~90 GB/s C2C")
    chunked_recompute: bool = Field(True, description="discard without the batch-stall term (InferCept's chunked recompute)")
    oracle: bool = Field(False, description="use the agent's pre-sampled pause as T_INT (clairvoyant)")
    cold_start_mean_s: float = Field(10.0, gt=0, description="T_INT before any pause of that kind was seen (s)")
    discard_mode: Literal["soft", "strict"] = "soft"
    discard_priority: bool = Field(True, description="soft discard: evict the discarded chain first (false: plain unpin)")
    force_action: Literal["preserve", "discard", "swap"] | None = Field(
        None, description="always take this action (tests and ablations); null = least waste")


@EVICTION_POLICIES.register("infercept")
class InferCept(PinWrapper):
    """Per-pause preserve / swap / discard by least wasted memory-time."""

    Params = InferCeptParams

    def __init__(self, params=None):
        super().__init__(params)
        self._started: dict = {}
        self._sums: dict[str, list[float]] = {}      # kind -> [sum, count]
        self._pending: list = []                       # (action, node) to apply after the unpin
        self._discarded: dict = {}                     # node -> True: soft-discarded, evict first
        self._trim_when_idle = False                   # see _adopt_trim_in_place
        self.actions = {"preserve": 0, "swap": 0, "discard": 0}
        self.swapped_blocks = 0
        self.discarded_blocks = 0

    # --- decision ------------------------------------------------------------------------------
    def t_int_s(self, tool: str, predicted_gap_s: float) -> float:
        if self.params.oracle and math.isfinite(predicted_gap_s):
            return predicted_gap_s
        total = self._sums.get(tool)
        return total[0] / total[1] if total and total[1] else self.params.cold_start_mean_s

    def can_swap(self) -> bool:
        tree = self.tree
        return hasattr(tree, "demote_path") and getattr(tree, "n_tiers", 1) > 1

    def wastes(self, context_blocks: int, t_int_s: float) -> dict[str, float]:
        p = self.params
        c = context_blocks
        batch = max(0, self.tree.used_blocks - c)
        t_fwd = c * p.recompute_s_per_block
        out = {"preserve": t_int_s * c,
               "discard": t_fwd * c + (0.0 if p.chunked_recompute else t_fwd * batch)}
        if self.can_swap():
            out["swap"] = 2.0 * c * p.swap_s_per_block * max(batch, 1)
        return out

    def choose(self, context_blocks: int, t_int_s: float) -> str:
        forced = self.params.force_action
        if forced is not None:
            return forced if forced != "swap" or self.can_swap() else "discard"
        wastes = self.wastes(context_blocks, t_int_s)
        return min(wastes, key=lambda a: (wastes[a], ("preserve", "swap", "discard").index(a)))

    # --- events --------------------------------------------------------------------------------------
    def on_tool_start(self, owner, node, predicted_gap_s, now_s, tool="tool"):
        self._started[owner] = (now_s, tool)
        if tool not in self.params.pin_tools:
            return
        n = _node(node)
        action = self.choose(n.end_block, self.t_int_s(tool, predicted_gap_s))
        self.actions[action] += 1
        if action == "preserve":
            self.pin(owner, n, now_s, math.inf, now_s + self.t_int_s(tool, predicted_gap_s), tool)
        elif action == "swap" or self.params.discard_mode == "strict" or self.params.discard_priority:
            self._pending.append((action, n))

    def on_tool_end(self, owner, now_s):
        started = self._started.pop(owner, None)
        if started is not None:
            start_s, tool = started
            total = self._sums.setdefault(tool, [0.0, 0])
            total[0] += now_s - start_s
            total[1] += 1
        super().on_tool_end(owner, now_s)

    def next_timer_s(self):
        if self._pending:
            return -math.inf   # due at once: right after the finishing request's unpin
        return super().next_timer_s()

    def on_timer(self, now_s):
        pending, self._pending = self._pending, []
        for action, node in pending:
            if action == "swap":
                self.swapped_blocks += self.tree.demote_path(node, now_s, reason="tool_demote")
            else:
                self._discard(node, now_s)
        super().on_timer(now_s)

    def _private_chain(self, node):
        """The unpinned, unshared chain from ``node`` up (deepest first)."""
        chain = []
        while node.parent is not None and node.alive and node.lock_ref == 0 and len(node.children) <= (1 if chain else 0):
            chain.append(node)
            node = node.parent
        return chain

    def _discard(self, node, now_s):
        chain = self._private_chain(node)
        if self.params.discard_mode == "strict" and not hasattr(self.tree, "tiers"):
            for n in chain:
                if n.alive and not n.children and n.lock_ref == 0:
                    self.discarded_blocks += len(n.keys)
                    self.tree.remove_tail(n, len(n.keys), "tool_discard")
            return
        for n in chain:
            self._discarded[n] = True

    # --- soft discard: discarded chains go first ---------------------------------------------------
    def on_access(self, node, now_s, hit=False):
        if self._discarded:
            self._discarded.pop(_node(node), None)
        super().on_access(node, now_s, hit)

    def on_split(self, upper, lower):
        if self._discarded and _node(lower) in self._discarded:
            self._discarded[_node(upper)] = True
        super().on_split(upper, lower)

    def on_remove(self, node, blocks, reason):
        if self._discarded:
            n = _node(node)
            if not n.alive:
                self._discarded.pop(n, None)
        super().on_remove(node, blocks, reason)

    def _adopt_trim_in_place(self) -> None:
        """Trim in place as the other pin wrappers do, but only while no discard is pending or
        soft: a pending discard holds an unpinned node until the next timer (a split of it
        leaves that object dead and the discard does nothing, an in-place trim would not), and
        a split re-enters the upper part at the end of ``_discarded``, whose order decides
        victims. Otherwise a trim with a renewed id is the split exactly, as for TTL-pin."""
        self._trim_when_idle = self.base.trim_in_place and isinstance(self.base, KeyedLeafPolicy)
        if self._trim_when_idle:
            self.trim_renews_id = True

    @property
    def trim_in_place(self) -> bool:  # read by the cache at each partial eviction
        return self._trim_when_idle and not self._pending and not self._discarded

    # PinWrapper's properties with the discards' condition, spelled out (read before every
    # path-touch: one property frame instead of two).
    @property
    def access_leaf_only(self) -> bool:
        return not self._discarded and not self._released and self.base.access_leaf_only

    @property
    def access_evictable_only(self) -> bool:
        return not self._discarded and not self._released and self.base.access_evictable_only

    def pop_victim(self, now_s):
        if self._discarded:
            view = self.cache
            for n in list(self._discarded):
                entry = n.entries[0] if hasattr(n, "entries") else n
                if entry is not None and n.alive and view.is_evictable(entry):
                    return entry
                if not n.alive:
                    self._discarded.pop(n, None)
        return super().pop_victim(now_s)

    def counters(self):
        out = super().counters()
        out.update({f"infercept_{a}": v for a, v in self.actions.items()})
        out["infercept_swapped_blocks"] = self.swapped_blocks
        out["infercept_discarded_blocks"] = self.discarded_blocks
        return out
