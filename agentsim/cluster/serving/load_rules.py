"""Load rules: how much of a request's below-HBM prefix to load rather than recompute."""

from __future__ import annotations

from agentsim.registry import Registry

LOAD_RULES: Registry = Registry("load rule")


class LoadRule:
    """Chooses how many of the below-HBM segments (in path order) to load; the rest is recomputed.

    ``options`` is a list, per cut k = 0..K, of (load_s, recompute_s) estimates: loading the first
    k segments and recomputing the remaining matched tokens. Returns k.
    """

    Params = None

    def __init__(self, params=None):
        self.params = params

    def choose(self, options: list[tuple[float, float]]) -> int:
        raise NotImplementedError


@LOAD_RULES.register("cost_model")
class CostModelRule(LoadRule):
    """The cut with the smallest estimated load + recompute time (ties: load more)."""

    def choose(self, options):
        best_k, best = 0, float("inf")
        for k, (load_s, recompute_s) in enumerate(options):
            if load_s + recompute_s <= best:
                best_k, best = k, load_s + recompute_s
        return best_k


@LOAD_RULES.register("always_load")
class AlwaysLoad(LoadRule):
    """Load every below-HBM segment, never recompute a cached one."""

    def choose(self, options):
        return len(options) - 1


@LOAD_RULES.register("never_load")
class NeverLoad(LoadRule):
    """Recompute everything below HBM (lower tiers only keep copies)."""

    def choose(self, options):
        return 0
