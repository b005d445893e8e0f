"""What every router shares: the workers, its parameters, and its own record of the requests in
flight on each worker.

A router sees only what a real one sees: the requests it routed, the responses coming back
(first token, completion) and, for the KV-aware router, the KV events the workers publish. Its
load figures are therefore its own bookkeeping (requests routed and not finished per worker),
which equals the instance's waiting + running count because every request reaches its instance
at once and leaves it when it finishes. It never reads a worker's cache.

Contract: the simulation calls :meth:`submit` for each request and :meth:`on_finish` for each
finished or rejected one, in event order. A router with :attr:`Router.tracks_first_tokens` is
also told of each routed request's first token (:meth:`on_first_token`, by the instance when
the token is out: ``make_router`` connects them), as a real router sees the response stream.
"""

from __future__ import annotations

import numpy as np

from agentsim.cluster.request import LLMRequest


class Router:
    """Base class. Subclasses implement :meth:`choose` and may extend :meth:`place` and
    :meth:`on_finish` (always calling the base versions)."""

    Params = None
    #: A :class:`~agentsim.cluster.routers.kv_indexer.KvIndexer` when the router reads KV
    #: events; the engine then connects each worker's cache to it (see ``kv_events``).
    kv_indexer = None
    kv_event_delay_s = 0.0
    #: Whether :meth:`on_first_token` does anything (instances call it only then).
    tracks_first_tokens = False

    def __init__(self, instances: list, params=None, rng: np.random.Generator | None = None):
        self.instances = instances
        self.params = params if params is not None else (self.Params() if self.Params else None)
        self.rng = rng if rng is not None else np.random.default_rng(0)
        #: Requests routed to each worker and not finished yet (the router's own count).
        self.in_flight = [0] * len(instances)

    @classmethod
    def prefill_pool_params(cls, params):
        """The parameters this router takes over a disaggregated cluster's prefill pool (whose
        requests end at their first token); the same as over any pool unless a router says."""
        return params

    def choose(self, request: LLMRequest):
        raise NotImplementedError

    def submit(self, request: LLMRequest) -> None:
        self.place(request, self.choose(request))

    def place(self, request: LLMRequest, instance) -> None:
        """Record that ``request`` goes to ``instance`` and hand it over."""
        self.in_flight[instance.instance_id] += 1
        instance.submit(request)

    def on_first_token(self, request: LLMRequest) -> None:
        """The first token of ``request`` has streamed back (called at most once per request
        by its instance, only if :attr:`tracks_first_tokens`)."""

    def on_finish(self, request: LLMRequest) -> None:
        """The response to ``request`` has ended (finished or rejected)."""
        self.in_flight[request.instance] -= 1

    def least_loaded(self):
        """The worker with the fewest requests in flight (lowest index on ties)."""
        in_flight = self.in_flight
        return self.instances[in_flight.index(min(in_flight))]
