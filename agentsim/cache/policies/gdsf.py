"""GDSF with recompute cost (Cherkasova 1998; policies spec section 3.11).

Each run has ``H = L + F * C / C0``: F = hits while resident + 1, C = the recompute cost of
the run's deepest block (the one the cache trims first), C0 = the cost of block 0 (a scale so
H stays near 1), L = the inflation value, raised to the H of every evicted run. The smallest
H is evicted (ties: older access, deeper, older node). H is recomputed with the current L at
every insert and hit.

Cost model ``flops`` (default): prefill FLOPs of block b with B = ``block_tokens`` tokens
attending to ``b * B`` cached tokens before it,
``C(b) = B * (2 * active_params + 2 * attn_coeff * (b * B + B / 2))``, where ``attn_coeff`` is
the model's sum over layers of heads x (d_qk + d_v) (the scenario's ``model.attn_coeff``).
Deeper blocks cost more, the opposite incentive to vLLM's tail-first rule. Cost model
``unit`` (C = C0) makes GDSF exactly LFU with dynamic aging (LFU-DA). Block size S is
constant in block units, so it cancels.

Tier-aware cost (``tier_aware``, default on): when the run also has a copy in a tier below the
one this policy ranks (HBM with a DRAM copy, say), a miss costs loading it back, not
recomputing it, so ``C = min(recompute, load)`` with load = ``B * kv_bytes_per_token /
load_bandwidth_bytes_per_s`` seconds, expressed in FLOPs at ``prefill_flops_per_s``. Cost is
priced when H is recomputed (insert and hit), so a copy made later counts from the next hit.
On a cache without lower tiers nothing changes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policy import KeyedLeafPolicy


class GDSFParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cost_model: Literal["flops", "unit"] = Field("flops", description="flops: position-aware prefill FLOPs; unit: LFU-DA")
    block_tokens: int = Field(64, gt=0, description="tokens per block (the scenario's cache.block_tokens)")
    active_params: float = Field(37e9, gt=0, description="parameters active per token")
    attn_coeff: float = Field(2.5e6, ge=0, description="sum over layers of heads x (d_qk + d_v)")
    tier_aware: bool = Field(True, description="price a run with a copy in a lower tier by its load time")
    kv_bytes_per_token: float = Field(35136, gt=0, description="KV bytes per token (the scenario's model)")
    load_bandwidth_bytes_per_s: float = Field(150e9, gt=0, description="bandwidth of a load from the tier below")
    prefill_flops_per_s: float = Field(7e15, gt=0, description="the instance's prefill FLOP/s at its MFU")


@EVICTION_POLICIES.register("gdsf")
class GDSF(KeyedLeafPolicy):
    """Greedy-Dual-Size-Frequency with position-aware recompute cost."""

    Params = GDSFParams
    # A partly evicted leaf is shortened in place and repriced as the split's upper part would
    # be (see on_remove); the renewed node id keeps the split's tie-break.
    trim_in_place = True
    trim_renews_id = True

    def __init__(self, params=None):
        super().__init__(params)
        p = self.params
        self.inflation = 0.0
        # The cost formula's constant factors, computed once (the same float operations in the
        # same order as spelling them out in _raw_cost, so the same bits).
        self._unit = p.cost_model == "unit"
        self._two_active = 2.0 * p.active_params
        self._two_attn = 2.0 * p.attn_coeff
        self._block_tokens = p.block_tokens
        self._half_block = p.block_tokens / 2.0
        #: Whether a run may have a copy in a lower tier (False once bound to a plain cache).
        self._check_copies = p.tier_aware and p.cost_model == "flops"
        self._c0 = self._raw_cost(0)

    def bind(self, cache):
        super().bind(cache)
        from agentsim.cache.radix import RadixCache

        if type(cache) is RadixCache:  # no lower tiers: no run ever has a copy below
            self._check_copies = False

    def _raw_cost(self, block_index: int) -> float:
        if self._unit:
            return 1.0
        b = self._block_tokens
        return b * (self._two_active + self._two_attn * (block_index * b + self._half_block))

    def cost(self, node, end_block: int | None = None) -> float:
        """Relative miss cost of ``node``'s deepest block (recomputing block 0 costs 1); with
        ``end_block``, of the block before it (``node`` shortened to end there)."""
        recompute = self._raw_cost((node.end_block if end_block is None else end_block) - 1)
        if self._check_copies and _has_copy_below(node):
            p = self.params
            load_s = p.block_tokens * p.kv_bytes_per_token / p.load_bandwidth_bytes_per_s
            recompute = min(recompute, load_s * p.prefill_flops_per_s)
        return recompute / self._c0

    def _rescore(self, node):
        frequency = node.hit_count + 1
        node.policy_data = self.inflation + frequency * self.cost(node)

    def key(self, node):
        return (node.policy_data, node.last_access_s, -(node.start_block + len(node.keys)))  # -end_block

    def on_insert(self, node, now_s):
        self._rescore(node)
        super().on_insert(node, now_s)

    def on_access(self, node, now_s, hit=False):
        if hit or node.policy_data is None:
            self._rescore(node)
        self._push_if_evictable(node)  # KeyedLeafPolicy.on_access, without its frame

    def on_split(self, upper, lower):
        # Same F and L; each part is priced by its own deepest block.
        upper.policy_data = lower.policy_data - (lower.hit_count + 1) * self.cost(lower) + (upper.hit_count + 1) * self.cost(upper) \
            if lower.policy_data is not None else None
        super().on_split(upper, lower)

    def on_remove(self, node, blocks, reason):
        if reason == "capacity" and node.policy_data is not None and node.policy_data > self.inflation:
            self.inflation = node.policy_data  # L = max(L, H of the evicted run)
        if node.alive and node.policy_data is not None:
            # Trimmed in place: priced as on_split prices the upper part that remains.
            frequency = node.hit_count + 1
            node.policy_data = node.policy_data - frequency * self.cost(node) \
                + frequency * self.cost(node, node.end_block - blocks)


def _has_copy_below(entry) -> bool:
    """Whether a tier entry's node is also resident in a tier below the entry's own tier.
    (A plain radix node has no tiers, hence no copy below.)"""
    tier = getattr(entry, "tier", None)
    entries = getattr(getattr(entry, "node", None), "entries", None)
    if tier is None or entries is None:
        return False
    return any(other is not None for other in entries[tier.index + 1:])
