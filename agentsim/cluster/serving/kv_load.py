"""Loading an admitted request's KV up the memory hierarchy into HBM, and the link time of the
tiered cache's own copies down.

:class:`KvLoader` is the serving instance's collaborator for both. Uses of its host (the
instance): ``env``, ``cache`` (a :class:`~agentsim.cache.tiers.TieredCache`), ``links``,
``block_bytes``, ``loading`` (loads in flight, which it counts up; ``kv_arrived()`` counts it
down) and ``kv_arrived()``.
"""

from __future__ import annotations

import simpy

from agentsim.cache.radix import Node
from agentsim.cluster.serving.batch import Running
from agentsim.cluster.serving.movement import load_along_path, stream_through


class KvLoader:
    """Runs loads from lower tiers (and peers' HBM) as SimPy processes over the host's links."""

    def __init__(self, host):
        self.host = host

    def on_cache_transfer(self, src: str, dst: str, n_blocks: int) -> None:
        """Copies down (demotion, write-through) occupy links; the cache accounted them already."""
        host = self.host
        link = host.links.write_link(src, dst)
        if link is not None:
            link.transfer(n_blocks * host.block_bytes)

    def start(self, state: Running, deepest: Node, load_blocks: int, jobs: list[tuple[str, int]],
              peer_links: list | None = None) -> None:
        """Run an admitted request's load of ``jobs`` ((tier name, blocks)) into HBM; a
        ``peer_hbm`` job streams through ``peer_links`` (the source peer's path)."""
        host = self.host
        host.loading += 1
        state.kv_waits += 1
        host.env.process(self._load(state, deepest, load_blocks, jobs, peer_links))

    def _load(self, state: Running, deepest: Node, load_blocks: int, jobs: list[tuple[str, int]],
              peer_links: list | None = None):
        """Move the chosen blocks up (all sources in parallel; disk/remote stage through DRAM)."""
        host = self.host
        env = host.env
        block_bytes = host.block_bytes
        procs = [env.process(stream_through(env, peer_links, n_blocks * block_bytes)
                             if name == "peer_hbm" and peer_links else
                             load_along_path(host.links, name, n_blocks * block_bytes))
                 for name, n_blocks in jobs]
        yield simpy.AllOf(env, procs)
        now = env.now
        if load_blocks:
            host.cache.finish_load(deepest, load_blocks, now)
        req = state.req
        req.loaded_bytes = sum(n for _, n in jobs) * block_bytes
        req.load_done_s = now
        host.kv_arrived(state)
