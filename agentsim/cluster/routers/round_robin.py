"""``round_robin``: workers in turn, blind to load and cache."""

from __future__ import annotations

from agentsim.cluster.routers.base import Router
from agentsim.cluster.routers.registry import ROUTERS


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    """Workers in turn, blind to load and cache."""

    def __init__(self, instances, params=None, rng=None):
        super().__init__(instances, params, rng)
        self._next = 0

    def choose(self, request):
        instance = self.instances[self._next % len(self.instances)]
        self._next += 1
        return instance
