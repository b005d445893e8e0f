"""``cache_aware``: the SGLang router's ``cache_aware`` policy (``sgl-router``).

The router keeps an *approximate* prefix tree per worker, built from the requests it routed
there (it never hears from the caches): every routed prompt is inserted into its worker's tree.
For each request:

1. Load balance first. With ``load_w`` the router's count of requests in flight on ``w``, the
   cluster is imbalanced when ``max - min > balance_abs_threshold`` **and**
   ``max > balance_rel_threshold * min``; then the request goes to the least-loaded worker
   (shortest queue, lowest index on ties).
2. Otherwise the worker whose tree matches the longest prefix of the prompt is found; if the
   match rate (matched / prompt blocks) exceeds ``cache_threshold`` the request goes there
   (ties: least loaded), else to the worker with the smallest tree (most free cache, as the
   SGLang router assumes).

Eviction: every ``eviction_interval_s`` of simulated time each tree is cut back to
``max_tree_tokens`` by LRU over its leaves (the SGLang router's periodic eviction thread); a tree
never grows beyond ``4 x max_tree_tokens`` in between (LRU at insert).

Differences from SGLang: trees are over KV block keys, not characters (match rates are in blocks);
the match costs one walk of each worker's tree (SGLang keeps one tree with a tenant set per node).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cache.policies.lru import LRU
from agentsim.cache.radix import RadixCache
from agentsim.cluster.routers.base import Router
from agentsim.cluster.routers.registry import ROUTERS

#: A tree may grow to this multiple of ``max_tree_tokens`` between two periodic evictions.
TREE_HEADROOM = 4


class CacheAwareParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cache_threshold: float = Field(0.5, ge=0, le=1, description="least prefix match rate that routes to the "
                                   "best-matching worker; below it the smallest tree wins")
    balance_abs_threshold: int = Field(32, ge=0, description="imbalanced when max - min requests in flight "
                                       "exceeds this (and the relative test holds)")
    balance_rel_threshold: float = Field(1.5, ge=1, description="imbalanced when max > this x min requests "
                                         "in flight (and the absolute test holds)")
    max_tree_tokens: int = Field(2**24, gt=0, description="tokens each worker's approximate tree is cut back "
                                 "to at each periodic eviction")
    eviction_interval_s: float = Field(60.0, gt=0, description="simulated seconds between periodic evictions")


@ROUTERS.register("cache_aware")
class CacheAware(Router):
    """SGLang router: approximate prefix tree per worker; shortest queue when imbalanced."""

    Params = CacheAwareParams

    def __init__(self, instances, params=None, rng=None):
        super().__init__(instances, params, rng)
        block_tokens = max(inst.block_tokens for inst in instances)
        self.max_tree_blocks = max(1, self.params.max_tree_tokens // block_tokens)
        self.trees = [RadixCache(TREE_HEADROOM * self.max_tree_blocks, LRU(), name=f"router-tree-{i}")
                      for i in range(len(instances))]
        self._next_eviction_s = self.params.eviction_interval_s
        self.balanced_choices = 0
        self.imbalanced_choices = 0

    def imbalanced(self) -> bool:
        in_flight = self.in_flight
        high, low = max(in_flight), min(in_flight)
        return high - low > self.params.balance_abs_threshold and high > self.params.balance_rel_threshold * low

    def _evict_periodically(self, now_s: float) -> None:
        if now_s < self._next_eviction_s:
            return
        for tree in self.trees:
            excess = tree.used_blocks - self.max_tree_blocks
            if excess > 0:
                tree.evict(excess, now_s, "router_tree_size")
        interval = self.params.eviction_interval_s
        self._next_eviction_s += interval * (1 + int((now_s - self._next_eviction_s) // interval))

    def choose(self, request):
        now_s = request.arrival_s
        self._evict_periodically(now_s)
        if self.imbalanced():
            self.imbalanced_choices += 1
            return self.least_loaded()
        self.balanced_choices += 1
        keys = request.prompt_keys
        in_flight = self.in_flight
        best_w, best_rank = 0, None
        for w, tree in enumerate(self.trees):
            rank = (-tree.match(keys, now_s, touch=False).hit_blocks, in_flight[w], w)
            if best_rank is None or rank < best_rank:
                best_w, best_rank = w, rank
        if keys and -best_rank[0] / len(keys) > self.params.cache_threshold:
            return self.instances[best_w]
        sizes = [tree.used_blocks for tree in self.trees]
        return self.instances[sizes.index(min(sizes))]

    def place(self, request, instance) -> None:
        tree = self.trees[instance.instance_id]
        keys = request.prompt_keys[:tree.capacity_blocks]
        if keys:
            tree.serve(keys, len(keys), request.arrival_s)
        super().place(request, instance)
