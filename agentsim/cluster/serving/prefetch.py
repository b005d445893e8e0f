"""HiCache-style L3 -> L2 prefetch (section 2.3 of the policies reference).

When a request arrives, the part of its prefix found only below the host tier (the cache's
``staging_tier``: DRAM, or another kind flagged ``host``) in disk or remote is staged into the
host tier chunk by chunk if it is at least ``threshold_tokens`` long. The stop rule, a
registered :data:`PREFETCH_POLICIES` class named by ``cache.tiers.prefetch.policy``, decides
when the request may be scheduled: ``best_effort`` as soon as it otherwise would be,
``wait_complete`` when the whole prefetch arrived, ``timeout`` at the earlier of the two and
``timeout_base_s + timeout_per_ki_token_s * tokens / 1024`` after arrival. Whatever arrived is
loaded from the host tier at admission; the rest is recomputed.

A :class:`Prefetcher` uses of its instance: ``env``, ``cache`` (a
:class:`~agentsim.cache.tiers.TieredCache`), ``links``, ``block_tokens``, ``block_bytes``,
``tier_stats`` and ``wake()``.
"""

from __future__ import annotations

from agentsim.cache.tiers import TieredCache
from agentsim.cluster.request import LLMRequest
from agentsim.registry import Registry

PREFETCH_POLICIES: Registry = Registry("prefetch policy")


class PrefetchStopRule:
    """When a request with a prefetch in flight may be scheduled."""

    #: Whether the instance must be woken at the prefetch's deadline (the rule looks at it).
    wakes_at_deadline = False

    def ready(self, prefetch: "Prefetch", now_s: float) -> bool:
        raise NotImplementedError


@PREFETCH_POLICIES.register("best_effort")
class BestEffort(PrefetchStopRule):
    """Schedule as soon as the request otherwise would be; load what arrived, recompute the rest."""

    def ready(self, prefetch, now_s):
        return True


@PREFETCH_POLICIES.register("wait_complete")
class WaitComplete(PrefetchStopRule):
    """Schedule only when the whole prefetch has arrived."""

    def ready(self, prefetch, now_s):
        return False


@PREFETCH_POLICIES.register("timeout")
class Timeout(PrefetchStopRule):
    """Schedule when the prefetch arrived or its size-scaled timeout passed, whichever is first."""

    wakes_at_deadline = True

    def ready(self, prefetch, now_s):
        return now_s >= prefetch.deadline_s


class Prefetch:
    """One request's L3 -> DRAM prefetch."""

    __slots__ = ("pin", "deadline_s", "staged", "stopped", "finished")

    def __init__(self, pin, deadline_s: float):
        self.pin = pin
        self.deadline_s = deadline_s
        self.staged: dict[str, int] = {}   # blocks staged into DRAM by source tier name
        self.stopped = False
        self.finished = False


class Prefetcher:
    """The prefetches of one instance (``config``: a ``PrefetchConfig`` whose policy is not none)."""

    def __init__(self, host, config):
        self.host = host
        self.config = config
        self.rule: PrefetchStopRule = PREFETCH_POLICIES.get(config.policy)()
        self.chunk_blocks = max(1, config.chunk_tokens // host.block_tokens)
        self._prefetches: dict[int, Prefetch] = {}   # request id -> its prefetch

    def ready(self, req: LLMRequest, now_s: float) -> bool:
        """Whether ``req`` may be scheduled now as far as its prefetch is concerned."""
        pf = self._prefetches.get(req.request_id)
        if pf is None or pf.finished:
            return True
        return self.rule.ready(pf, now_s)

    def start(self, req: LLMRequest) -> None:
        """Start prefetching ``req``'s prefix run found only below the host tier, if it is long enough."""
        host = self.host
        cache: TieredCache = host.cache
        now = host.env.now
        match = cache.match(req.prompt_keys, now, touch=False)
        run_blocks = 0
        deepest = None
        staging = cache.staging_tier
        for node in cache.path(match.node):
            if node.entries[0] is None and node.entries[staging] is None and not node.loading:
                run_blocks += len(node.keys)
                deepest = node
            elif deepest is not None:
                break   # the L3 run continuing the local (HBM + host tier) match ends here
        cfg = self.config
        tokens = run_blocks * host.block_tokens
        if deepest is None or tokens < cfg.threshold_tokens:
            return
        pf = Prefetch(cache.begin_prefetch(deepest), now + cfg.timeout_base_s + cfg.timeout_per_ki_token_s * tokens / 1024)
        self._prefetches[req.request_id] = pf
        host.tier_stats["prefetches"] += 1
        host.tier_stats["prefetch_wanted_blocks"] += run_blocks
        host.env.process(self._run(pf))
        if self.rule.wakes_at_deadline:
            host.env.process(self._wake_at(pf.deadline_s))

    def end(self, req: LLMRequest) -> Prefetch | None:
        """Stop ``req``'s prefetch (it is being scheduled or rejected) and return it."""
        pf = self._prefetches.pop(req.request_id, None) if self._prefetches else None
        if pf is not None:
            pf.stopped = True
            self.host.cache.end_prefetch(pf.pin)
        return pf

    def release_others(self, req: LLMRequest) -> bool:
        """Stop every prefetch but ``req``'s and release its pins (the staged copies stay where
        the tiers' rules leave them); the requests stay queued, now ready. For an idle instance
        whose head request cannot get HBM room: the pins of prefetches waiting behind it hold
        HBM copies that nothing else would ever free. Returns whether any pin was released."""
        released = False
        cache = self.host.cache
        for request_id, pf in self._prefetches.items():
            if request_id != req.request_id and not pf.pin.released:
                pf.stopped = pf.finished = True
                cache.end_prefetch(pf.pin)
                released = True
        return released

    def _wake_at(self, at_s: float):
        env = self.host.env
        yield env.timeout(max(0.0, at_s - env.now))
        self.host.wake()

    def _run(self, pf: Prefetch):
        """Stage the pinned path's L3-only blocks into DRAM, one chunk at a time, until done or
        stopped (a chunk still in flight when the request is scheduled is discarded)."""
        host = self.host
        cache: TieredCache = host.cache
        env = host.env
        chunk = self.chunk_blocks
        while not pf.stopped:
            nxt = cache.next_to_stage(pf.pin)
            if nxt is None or nxt[1] is None:
                break
            node, src = nxt
            first_block = node.start_block
            n = min(len(node.keys), chunk)
            name = cache.tiers[src].name
            for link in host.links.staging_path(name):   # into the host tier (not on into HBM)
                yield link.transfer(n * host.block_bytes)
            if pf.stopped:
                break
            # Stage the arrived blocks [first_block, first_block + n) (others may have split the
            # nodes meanwhile: the block range, not the node, is what arrived).
            staged_any = False
            while True:
                nxt = cache.next_to_stage(pf.pin)
                if nxt is None or nxt[0].start_block >= first_block + n:
                    break
                take = min(len(nxt[0].keys), first_block + n - nxt[0].start_block)
                staged = cache.stage_prefetched(pf.pin, nxt[0], take, env.now)
                if not staged:
                    break
                staged_any = True
                pf.staged[name] = pf.staged.get(name, 0) + staged
                host.tier_stats["prefetch_staged_blocks"] += staged
            if not staged_any:
                break   # DRAM had no room: stop here
        pf.finished = True
        host.wake()
