"""Routers place each request on a serving instance; one module per router, each registered in
:data:`ROUTERS` with its own ``Params`` (see docs/routing.md for what each one models):

* ``kv_aware`` (default): Dynamo's KV router, cost from its KV-event view of each cache and load;
* ``cache_aware``: the SGLang router's approximate prefix trees with load-balance thresholds;
* ``session_affinity``: sticky sessions that overflow when their worker is saturated;
* ``least_loaded``, ``round_robin``: cache-blind baselines.

``prefix_affinity`` was retired into ``kv_aware`` (the registry's error says so).
``serving.sticky_sessions`` wraps any of them (:class:`StickySessions`).
"""

from __future__ import annotations

import numpy as np

from agentsim.cluster.routers.base import Router
from agentsim.cluster.routers.registry import RETIRED_ROUTERS, ROUTERS
from agentsim.cluster.routers import cache_aware, kv_aware, least_loaded, round_robin, session_affinity  # noqa: F401  (register)
from agentsim.cluster.routers.sticky import StickySessions

#: The spawn key of the routers' random stream under the scenario's SeedSequence (agents use 0-2).
ROUTER_SPAWN_KEY = (3,)


def router_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=ROUTER_SPAWN_KEY))


def make_router(scenario, instances: list, env=None, prefill_pool: bool = False) -> Router:
    """The scenario's router (``serving.router`` with ``serving.router_params``), sticky if asked.
    ``prefill_pool``: it routes a disaggregated cluster's prefill workers
    (:meth:`Router.prefill_pool_params` adapts its parameters).

    With a SimPy ``env``, a router that reads KV events gets them: every instance's cache is
    connected to its indexer through a :class:`~agentsim.cluster.kv_events.KvEventChannel`.
    A router that tracks first tokens is connected to every instance's ``on_first_token``.
    """
    from agentsim.cluster.kv_events import KvEventChannel

    serving = scenario.serving
    cls = ROUTERS.get(serving.router)
    params = ROUTERS.validate_params(serving.router, serving.router_params)
    if prefill_pool and params is not None:
        params = cls.prefill_pool_params(params)
    router = cls(instances, params, router_rng(scenario.seed))
    if serving.sticky_sessions:
        router = StickySessions(router)
    if router.tracks_first_tokens:
        for instance in instances:
            instance.on_first_token = router.on_first_token
    if router.kv_indexer is not None and env is not None:
        KvEventChannel(env, router.kv_indexer, router.kv_event_delay_s).connect(instances)
    return router


__all__ = ["ROUTERS", "RETIRED_ROUTERS", "Router", "StickySessions", "make_router", "router_rng"]
