"""``session_affinity``: sticky sessions with overflow.

A session's first call (and its sub-agents', which share its ``session_id``) goes to the
least-loaded worker, which becomes the session's home; later calls go home, unless home has
``saturation_requests`` or more requests in flight (default: the engine's batch cap, so a new
call would queue there), in which case the call overflows to the least-loaded worker, which
becomes the new home if ``rehome_on_overflow``. Loads are the router's own in-flight counts.
A session whose home is not saturated ignores the rest of the cluster, however idle.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cluster.routers.base import Router
from agentsim.cluster.routers.registry import ROUTERS


class SessionAffinityParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    saturation_requests: int | None = Field(None, gt=0, description="requests in flight at which a home "
                                            "worker overflows (default: the engine's max_batch_requests)")
    rehome_on_overflow: bool = Field(True, description="an overflowed session's home becomes the worker it overflowed to")


@ROUTERS.register("session_affinity")
class SessionAffinity(Router):
    """Sticky sessions; a call overflows to the least-loaded worker when its home is saturated."""

    Params = SessionAffinityParams

    def __init__(self, instances, params=None, rng=None):
        super().__init__(instances, params, rng)
        self.home: dict[int, object] = {}
        self.overflows = 0

    def saturation(self, instance) -> int:
        cap = self.params.saturation_requests
        return cap if cap is not None else instance.max_batch

    def choose(self, request):
        home = self.home.get(request.session_id)
        if home is None:
            home = self.home[request.session_id] = self.least_loaded()
            return home
        if self.in_flight[home.instance_id] < self.saturation(home):
            return home
        self.overflows += 1
        target = self.least_loaded()
        if self.params.rehome_on_overflow:
            self.home[request.session_id] = target
        return target
