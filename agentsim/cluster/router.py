"""Routers place each request on a serving instance.

* ``round_robin``: instances in turn.
* ``least_loaded``: fewest waiting + running requests (lowest index on ties).
* ``prefix_affinity``: longest cached prefix (a non-touching lookup), then least loaded;
  a session's calls stick to the instance holding its history.
"""

from __future__ import annotations

from agentsim.cluster.instance import ServingInstance
from agentsim.cluster.request import LLMRequest
from agentsim.registry import Registry

ROUTERS: Registry = Registry("router")


class Router:
    def __init__(self, instances: list[ServingInstance]):
        self.instances = instances

    def choose(self, request: LLMRequest) -> ServingInstance:
        raise NotImplementedError

    def submit(self, request: LLMRequest) -> None:
        self.choose(request).submit(request)


@ROUTERS.register("round_robin")
class RoundRobin(Router):
    def __init__(self, instances):
        super().__init__(instances)
        self._next = 0

    def choose(self, request):
        instance = self.instances[self._next % len(self.instances)]
        self._next += 1
        return instance


@ROUTERS.register("least_loaded")
class LeastLoaded(Router):
    def choose(self, request):
        return min(self.instances, key=lambda inst: (inst.load, inst.instance_id))


@ROUTERS.register("prefix_affinity")
class PrefixAffinity(Router):
    def choose(self, request):
        if len(self.instances) == 1:
            return self.instances[0]
        return min(
            self.instances,
            key=lambda inst: (-inst.cache.match(request.prompt_keys, 0.0, touch=False).hit_blocks, inst.load, inst.instance_id),
        )
