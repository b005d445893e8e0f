"""Provider-style TTL-expiry wrapper (policies spec sections 1.5 and 4.9).

Wraps a base eviction policy (``base``, default ``lru``) and adds a deadline per run:
``last_access_s + ttl_s`` with ``refresh_on_hit`` (any match or insert covering the run re-arms
it, as Anthropic's prompt cache does), or ``created_s + ttl_s`` without. Expiry is leaf first:
a run expires once it is an evictable leaf past its deadline (under path-touch a parent's
deadline is never earlier than its children's). Capacity eviction is the base policy's.

Timer contract for the engine: call ``policy.on_timer(now_s)`` at ``policy.next_timer_s()``
(or at any later time, e.g. before each request in a replay); it frees every expired run
through ``RadixCache.expire`` (eviction reason ``ttl_expiry``). ``counters()`` reports
``ttl_expirations_blocks`` and ``capacity_evictions_blocks``. ``ttl_s: inf`` reproduces the
base policy event for event. Presets: ``ttl_5m`` (300 s) and ``ttl_1h`` (3,600 s).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policy import EvictionPolicy, KeyedLeafPolicy


class TTLParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttl_s: float = Field(300.0, gt=0, description="idle lifetime in seconds (inf = never expire)")
    refresh_on_hit: bool = Field(True, description="a hit re-arms the deadline (provider prompt caches)")
    base: str = Field("lru", description="eviction policy used under capacity pressure")
    base_params: dict[str, Any] = Field(default_factory=dict, description="parameters of the base policy")

    @model_validator(mode="after")
    def _check_base(self):
        if self.base in ("ttl_expiry", "ttl_5m", "ttl_1h"):
            raise ValueError("a TTL wrapper cannot wrap another TTL wrapper")
        if self.base not in EVICTION_POLICIES:
            raise ValueError(EVICTION_POLICIES.unknown_message(self.base))
        EVICTION_POLICIES.validate_params(self.base, self.base_params)
        return self


class _Delegate(EvictionPolicy):
    """Forwards every hook to ``self.base``, the wrapped policy named by ``params.base``."""

    def __init__(self, params=None):
        super().__init__(params)
        p = self.params
        self.base = EVICTION_POLICIES.create(p.base, p.base_params)
        self.merge_runs = type(self.base).merge_runs
        self.allows_orphans = self.base.allows_orphans
        # Hooks the wrapper class does not override are the base's own bound methods: the
        # cache calls them directly (no forwarding frame) and sees the base's no-ops as such.
        for name in _FORWARDED:
            if getattr(type(self), name) is getattr(_Delegate, name):
                setattr(self, name, getattr(self.base, name))

    def _adopt_trim_in_place(self) -> None:
        """Trim in place when the bound base is a key-only policy that does (LRU, LFU, Belady,
        GDSF, T-LRU): with a renewed node id, the wrapper's and the base's orderings see the
        shortened node exactly as the split's upper part. Wrappers call this at bind, after
        binding the base, when their own hooks handle a node that stays alive in ``on_remove``."""
        if self.base.trim_in_place and isinstance(self.base, KeyedLeafPolicy):
            self.trim_in_place = True
            self.trim_renews_id = True

    def on_insert(self, node, now_s):
        self.base.on_insert(node, now_s)

    def on_access(self, node, now_s, hit=False):
        self.base.on_access(node, now_s, hit)

    def on_lookup(self, keys, hit_blocks, now_s):
        self.base.on_lookup(keys, hit_blocks, now_s)

    def on_release(self, node):
        self.base.on_release(node)

    def on_candidate(self, node):
        self.base.on_candidate(node)

    def on_split(self, upper, lower):
        self.base.on_split(upper, lower)

    def on_remove(self, node, blocks, reason):
        self.base.on_remove(node, blocks, reason)

    def pop_victim(self, now_s):
        return self.base.pop_victim(now_s)

    def peek_victim(self):
        return self.base.peek_victim()

    def state_bytes(self):
        return self.base.state_bytes()


_FORWARDED = ("on_insert", "on_access", "on_lookup", "on_release", "on_candidate", "on_split", "on_remove",
              "pop_victim", "peek_victim")


@EVICTION_POLICIES.register("ttl_expiry")
class TTLExpiry(_Delegate):
    """Base policy + idle-time expiry, refreshed on hit."""

    Params = TTLParams

    def __init__(self, params=None):
        super().__init__(params)
        self.ttl_s = self.params.ttl_s
        self._refresh = self.params.refresh_on_hit
        self._never_expires = math.isinf(self.ttl_s)
        self._deadlines: list = []  # (deadline_s, node_id, node)
        self.expired_blocks = 0
        self._plain_leaf_rule = False

    def bind(self, cache):
        super().bind(cache)
        self.base.bind(cache)
        # Arming acts only on evictable nodes, so the path-touch shortcuts of the base hold for
        # the wrapper too (the base sets them at bind).
        self.access_leaf_only = self.base.access_leaf_only
        self.access_evictable_only = self.base.access_evictable_only
        self._adopt_trim_in_place()  # the deadline heap breaks ties by node id, renewed
        from agentsim.cache.radix import RadixCache

        # The hot paths inline RadixCache.is_evictable when it is the cache's leaf rule.
        self._plain_leaf_rule = type(cache).is_evictable is RadixCache.is_evictable

    def _evictable(self, node) -> bool:
        if self._plain_leaf_rule:
            return node.alive and not node.lock_ref and not node.children and node.parent is not None
        return self.cache.is_evictable(node)

    def deadline_s(self, node) -> float:
        return (node.last_access_s if self._refresh else node.created_s) + self.ttl_s

    def _arm(self, node):
        if self._never_expires:
            return
        if self._plain_leaf_rule:  # _evictable, inlined: this runs for every notification
            if not (node.alive and not node.lock_ref and not node.children and node.parent is not None):
                return
        elif not self.cache.is_evictable(node):
            return
        deadline = (node.last_access_s if self._refresh else node.created_s) + self.ttl_s
        heapq.heappush(self._deadlines, (deadline, node.node_id, node))

    # The hooks call the base directly (as _Delegate's forwarding does), then arm.
    def on_insert(self, node, now_s):
        self.base.on_insert(node, now_s)
        self._arm(node)

    def on_access(self, node, now_s, hit=False):
        self.base.on_access(node, now_s, hit)
        self._arm(node)

    def on_candidate(self, node):
        self.base.on_candidate(node)
        self._arm(node)

    def on_split(self, upper, lower):
        self.base.on_split(upper, lower)
        self._arm(upper)
        self._arm(lower)

    def on_remove(self, node, blocks, reason):
        if reason == "ttl_expiry":
            self.expired_blocks += blocks
        self.base.on_remove(node, blocks, reason)

    def _clean_top(self):
        heap = self._deadlines
        evictable = self._evictable
        deadline_s = self.deadline_s
        plain = self._plain_leaf_rule
        refresh, ttl_s = self._refresh, self.ttl_s
        while heap:
            deadline, _id, node = heap[0]
            # The top's check with _evictable and deadline_s inlined (it runs before every
            # request of a replay); anything else goes the general way below.
            if (plain and node.alive and not node.lock_ref and not node.children and node.parent is not None
                    and (node.last_access_s if refresh else node.created_s) + ttl_s == deadline):
                return heap[0]
            if node.alive and evictable(node) and deadline_s(node) == deadline:
                return heap[0]
            heapq.heappop(heap)
            if node.alive and evictable(node) and deadline_s(node) > deadline:
                heapq.heappush(heap, (deadline_s(node), node.node_id, node))
        return None

    def next_timer_s(self):
        top = self._clean_top()
        return top[0] if top is not None else None

    def pop_expired(self, now_s):
        top = self._clean_top()
        if top is None or top[0] > now_s:
            return None
        heapq.heappop(self._deadlines)
        return top[2]

    def on_timer(self, now_s):
        self.cache.expire(now_s, "ttl_expiry")

    def counters(self):
        return {
            "ttl_expirations_blocks": self.expired_blocks,
            "capacity_evictions_blocks": self.cache.evicted_by_reason.get("capacity", 0) if self.cache else 0,
        }

    def describe(self):
        out = super().describe()
        out["base"] = self.base.describe()
        return out


class TTL5mParams(TTLParams):
    ttl_s: float = Field(300.0, gt=0, description="idle lifetime in seconds (5 minutes)")


class TTL1hParams(TTLParams):
    ttl_s: float = Field(3600.0, gt=0, description="idle lifetime in seconds (1 hour)")


@EVICTION_POLICIES.register("ttl_5m")
class TTL5m(TTLExpiry):
    """Provider prompt cache, 5-minute TTL refreshed on hit."""

    Params = TTL5mParams


@EVICTION_POLICIES.register("ttl_1h")
class TTL1h(TTLExpiry):
    """Provider prompt cache, 1-hour TTL refreshed on hit."""

    Params = TTL1hParams
