"""``serving.sticky_sessions``: wraps any router so that a session's calls (and its sub-agents')
all go where its first call went, placed by the wrapped router. Unlike ``session_affinity`` it
never overflows. The wrapped router still does its bookkeeping for every call it did not choose.
"""

from __future__ import annotations

from agentsim.cluster.routers.base import Router


class StickySessions(Router):
    def __init__(self, inner: Router):
        super().__init__(inner.instances, None, inner.rng)
        self.inner = inner
        self.kv_indexer = inner.kv_indexer
        self.kv_event_delay_s = inner.kv_event_delay_s
        self.tracks_first_tokens = inner.tracks_first_tokens
        self.home: dict[int, object] = {}

    def choose(self, request):
        instance = self.home.get(request.session_id)
        if instance is None:
            instance = self.home[request.session_id] = self.inner.choose(request)
        return instance

    def submit(self, request) -> None:
        self.inner.place(request, self.choose(request))

    def on_first_token(self, request) -> None:
        self.inner.on_first_token(request)

    def on_finish(self, request) -> None:
        self.inner.on_finish(request)
