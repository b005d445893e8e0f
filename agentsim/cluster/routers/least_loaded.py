"""``least_loaded``: the worker with the fewest requests in flight (shortest queue), blind to
the cache; lowest index on ties."""

from __future__ import annotations

from agentsim.cluster.routers.base import Router
from agentsim.cluster.routers.registry import ROUTERS


@ROUTERS.register("least_loaded")
class LeastLoaded(Router):
    """Fewest requests in flight (shortest queue), blind to the cache."""

    def choose(self, request):
        return self.least_loaded()
