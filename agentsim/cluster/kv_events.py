"""KV events: each worker's cache publishes the blocks it stores and removes; the events reach
the router's indexer ``delay_s`` later (the publish / subscribe hop of a real deployment,
e.g. ZMQ or NATS between the engine and Dynamo's router).

The cache side is one attribute, ``cache.kv_listener`` (``None``: no events, no cost), called as
``blocks_stored(keys)`` when blocks enter the cache and ``blocks_removed(keys)`` when they leave
it (for a tiered cache: enter or leave the tree, i.e. the worker holds them in some tier). The
``keys`` lists are never mutated afterwards, so they are queued as they are.

Delivery keeps the order the events happened in (one queue, one delay for every worker), which is
what keeps the router's view prefix-closed. With ``delay_s == 0`` events are applied at once; else
one SimPy timeout is pending at a time, for the oldest undelivered event, and each one delivers
every event due by then.
"""

from __future__ import annotations

from collections import deque

import simpy

from agentsim.cluster.routers.kv_indexer import KvIndexer

_STORED = True
_REMOVED = False


class KvEventPublisher:
    """One worker's end of the channel: what its cache calls."""

    __slots__ = ("channel", "worker")

    def __init__(self, channel: "KvEventChannel", worker: int):
        self.channel = channel
        self.worker = worker

    def blocks_stored(self, keys: list[int]) -> None:
        self.channel.publish(self.worker, _STORED, keys)

    def blocks_removed(self, keys: list[int]) -> None:
        self.channel.publish(self.worker, _REMOVED, keys)


class KvEventChannel:
    """Carries every worker's KV events to one indexer, ``delay_s`` after they happen."""

    def __init__(self, env: simpy.Environment, indexer: KvIndexer, delay_s: float):
        if delay_s < 0:
            raise ValueError("KV event delay must be >= 0")
        self.env = env
        self.indexer = indexer
        self.delay_s = float(delay_s)
        self._queue: deque = deque()   # (due_s, worker, stored?, keys) in publish order
        self._pending = False

    def publisher(self, worker: int) -> KvEventPublisher:
        return KvEventPublisher(self, worker)

    def connect(self, instances: list) -> None:
        """Make every instance's cache publish into this channel."""
        for inst in instances:
            inst.cache.kv_listener = self.publisher(inst.instance_id)

    def publish(self, worker: int, stored: bool, keys: list[int]) -> None:
        if self.delay_s == 0.0:
            self._apply(worker, stored, keys)
            return
        self._queue.append((self.env.now + self.delay_s, worker, stored, keys))
        if not self._pending:
            self._schedule(self.delay_s)

    def _apply(self, worker: int, stored: bool, keys: list[int]) -> None:
        if stored:
            self.indexer.apply_stored(worker, keys)
        else:
            self.indexer.apply_removed(worker, keys)

    def _schedule(self, after_s: float) -> None:
        self._pending = True
        self.env.timeout(after_s).callbacks.append(self._deliver)

    def _deliver(self, _event) -> None:
        queue = self._queue
        # A tolerance for the rounding of now + (due - now): the event is due now.
        now = self.env.now + 1e-12
        while queue and queue[0][0] <= now:
            _, worker, stored, keys = queue.popleft()
            self._apply(worker, stored, keys)
        self._pending = False
        if queue:
            self._schedule(max(0.0, queue[0][0] - self.env.now))
