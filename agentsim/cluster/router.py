"""Routers place each request on a serving instance.

* ``round_robin``: instances in turn.
* ``least_loaded``: fewest waiting + running requests (lowest index on ties).
* ``prefix_affinity``: cache-aware, in the style of Mooncake's conductor and Dynamo's KV router:
  minimise ``tokens to prefill + load_penalty_tokens * load`` where the tokens to prefill are
  the prompt minus its cached prefix on that instance (HBM hits; lower-tier hits count at
  ``lower_tier_weight``) and load is waiting + running requests. With a large penalty it is
  least-loaded; with 0 it is pure longest-prefix (a session's calls follow its history).

``serving.sticky_sessions`` wraps any router: a session's first call is placed by the router,
later calls (and its sub-agents) go to the same instance.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cluster.serving.instance import ServingInstance
from agentsim.cluster.request import LLMRequest
from agentsim.registry import Registry

ROUTERS: Registry = Registry("router")


class Router:
    Params = None

    def __init__(self, instances: list[ServingInstance], params=None):
        self.instances = instances
        self.params = params if params is not None else (self.Params() if self.Params else None)

    def choose(self, request: LLMRequest) -> ServingInstance:
        raise NotImplementedError

    def submit(self, request: LLMRequest) -> None:
        self.choose(request).submit(request)


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    def __init__(self, instances, params=None):
        super().__init__(instances, params)
        self._next = 0

    def choose(self, request):
        instance = self.instances[self._next % len(self.instances)]
        self._next += 1
        return instance


@ROUTERS.register("least_loaded")
class LeastLoaded(Router):
    def choose(self, request):
        return min(self.instances, key=lambda inst: (inst.load, inst.instance_id))


class AffinityParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    load_penalty_tokens: float = Field(0.0, ge=0, description="prefill tokens one queued/running request is worth")
    lower_tier_weight: float = Field(0.5, ge=0, le=1, description="share of a below-HBM hit counted as cached")


@ROUTERS.register("prefix_affinity")
class PrefixAffinity(Router):
    Params = AffinityParams

    def __init__(self, instances, params=None):
        super().__init__(instances, params)
        self._max_block_tokens = max(inst.block_tokens for inst in instances)

    def _cached_tokens(self, inst: ServingInstance, keys: list[int]) -> float:
        cache = inst.cache
        bt = inst.block_tokens
        if inst.tiered:
            hbm_blocks, any_blocks = cache.peek(keys)
            return bt * (hbm_blocks + self.params.lower_tier_weight * (any_blocks - hbm_blocks))
        return bt * cache.match(keys, 0.0, touch=False).hit_blocks

    def choose(self, request):
        """The instance with the least ``(score, load, instance_id)``, where score is the prompt
        minus its cached tokens there plus ``load_penalty_tokens * load``.

        Instances are visited from least to most loaded, and the visit stops as soon as the
        load term alone rules the rest out: no instance caches more than the prompt's full
        blocks, so its score is at least ``prompt - cached_max + penalty * load``. Every
        instance left unvisited therefore scores worse, or ties and loses the ``(load, id)``
        tie-break to one visited before it: the choice is exactly that of a full scan, while on
        a busy rack most instances are never peeked (a peek walks that instance's tree).
        """
        instances = self.instances
        if len(instances) == 1:
            return instances[0]
        penalty = self.params.load_penalty_tokens
        prompt = request.prompt_tokens
        keys = request.prompt_keys
        floor = prompt - self._max_block_tokens * len(keys)  # prompt minus the most any instance caches
        best = None
        best_rank = None
        # Each instance's load is read once: (load, id) is unique per instance, so sorting the
        # triples never compares instances and gives the order of a sort keyed by (load, id).
        for load, instance_id, inst in sorted([(inst.load, inst.instance_id, inst) for inst in instances]):
            if best_rank is not None and floor + penalty * load >= best_rank[0]:
                break
            rank = (prompt - self._cached_tokens(inst, keys) + penalty * load, load, instance_id)
            if best_rank is None or rank < best_rank:
                best, best_rank = inst, rank
        return best


class StickySessions(Router):
    """Calls of a session go where its first call went (placed by ``inner``)."""

    def __init__(self, inner: Router):
        super().__init__(inner.instances)
        self.inner = inner
        self.home: dict[int, ServingInstance] = {}

    def choose(self, request):
        instance = self.home.get(request.session_id)
        if instance is None:
            instance = self.home[request.session_id] = self.inner.choose(request)
        return instance


def make_router(scenario, instances: list[ServingInstance]) -> Router:
    """The scenario's router (``serving.router`` with ``serving.router_params``), sticky if asked."""
    serving = scenario.serving
    cls = ROUTERS.get(serving.router)
    params = ROUTERS.validate_params(serving.router, serving.router_params)
    router = cls(instances, params)
    return StickySessions(router) if serving.sticky_sessions else router
