"""Admission: which waiting requests join the batch, with which cached prefix and reservation.

Cache protocol per request (order fixed, see the policies reference section 1.3): MATCH the
prompt's blocks (path-touch) -> PIN the matched prefix -> RESERVE blocks for the new prompt and
output tokens (may evict, never the pinned prefix) -> prefill/decode -> COMMIT -> UNPIN. A
request that can never fit (more blocks than the cache holds) is rejected; one that does not
fit now waits (FCFS, head of line).

:class:`PlainAdmission` serves a single-tier :class:`~agentsim.cache.radix.RadixCache`.
:class:`TieredAdmission` serves a :class:`~agentsim.cache.tiers.TieredCache`: it sees the
per-tier breakdown of the matched prefix, and its load rule
(:data:`~agentsim.cluster.serving.load_rules.LOAD_RULES`, cost-model comparison by default)
picks how much of the below-HBM part to load rather than recompute. Loaded blocks are reserved
in HBM with the rest; the instance runs the load. Peer HBM hits (another instance of the NVLink
domain) come over NVLink. With a prefetcher or return prefetches, requests not ready yet are
skipped (others behind them may be scheduled).

An admission object uses of its instance: ``env``, ``cache``, ``cost``, ``block_tokens``,
``waiting``, ``batch``, ``max_batch``, ``on_finish``, and for the tiered kind also ``links``,
``peers``, ``load_rule``, ``prefetcher``, ``tool_gap``, ``tier_stats`` and ``start_load()``.
"""

from __future__ import annotations

from agentsim.cache.tiers import TieredCache
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.batch import Running
from agentsim.cluster.serving.movement import below_hbm_segments


class Admission:
    """Admits waiting requests into the batch of ``host`` while they fit."""

    def __init__(self, host):
        self.host = host

    def admit(self) -> None:
        raise NotImplementedError

    def _reject(self, req: LLMRequest, now: float) -> None:
        req.rejected = True
        req.finish_s = now
        self.host.on_finish(req)


class PlainAdmission(Admission):
    """FCFS admission over a single-tier radix cache."""

    def admit(self) -> None:
        host = self.host
        cache = host.cache
        now = host.env.now
        block_tokens = host.block_tokens
        waiting = host.waiting
        batch = host.batch
        max_batch = host.max_batch
        while waiting and len(batch.running) < max_batch:
            req = waiting[0]
            total_blocks = -(-(req.prompt_tokens + req.output_tokens) // block_tokens)
            if total_blocks > cache.capacity_blocks:
                waiting.popleft()
                self._reject(req, now)
                continue
            match = cache.match(req.prompt_keys, now)
            cached = match.hit_blocks
            cache.pin(match.node)
            need = total_blocks - cached
            if not cache.reserve(need, now):
                cache.unpin(match.node)
                break
            waiting.popleft()
            # At least one prompt token is always computed (it produces the first output token).
            # (min(cached tokens, prompt - 1), spelled as a comparison: the builtin's argument
            # parsing is costly on this path.)
            hit_tokens = cached * block_tokens
            if req.prompt_tokens - 1 < hit_tokens:
                hit_tokens = req.prompt_tokens - 1
            req.hit_tokens = hit_tokens
            req.admitted_s = now
            batch.join(Running(req, match.node, cached, need, hit_tokens))


class TieredAdmission(Admission):
    """Admission over a tiered cache: load-or-recompute per below-HBM segment, peer-HBM hits,
    and (with a prefetcher or return prefetches) skipping requests that are held."""

    def __init__(self, host):
        super().__init__(host)
        #: True when some waiting requests may not be schedulable yet (prefetch stop rules, own
        #: return prefetch in flight): admission then skips them instead of taking the head.
        self.holds = host.prefetcher is not None or (host.tool_gap is not None and host.tool_gap.holds)

    def admit(self) -> None:
        if self.holds:
            self._admit_with_holds()
            return
        host = self.host
        cache = host.cache
        now = host.env.now
        block_tokens = host.block_tokens
        waiting = host.waiting
        while waiting and len(host.batch.running) < host.max_batch:
            req = waiting[0]
            total_blocks = -(-(req.prompt_tokens + req.output_tokens) // block_tokens)
            if total_blocks > cache.capacity_blocks:
                waiting.popleft()
                self._reject(req, now)
                continue
            if not self._admit_one(req, total_blocks, now):
                break

    def _admit_with_holds(self) -> None:
        """FCFS among the ready waiting requests, skipping held ones."""
        host = self.host
        cache = host.cache
        now = host.env.now
        block_tokens = host.block_tokens
        waiting = host.waiting
        i = 0
        while i < len(waiting) and len(host.batch.running) < host.max_batch:
            req = waiting[i]
            if not self._ready(req, now):
                i += 1
                continue
            total_blocks = -(-(req.prompt_tokens + req.output_tokens) // block_tokens)
            if total_blocks > cache.capacity_blocks:
                del waiting[i]
                if host.prefetcher is not None:
                    host.prefetcher.end(req)
                self._reject(req, now)
                continue
            if not self._admit_one(req, total_blocks, now, index=i):
                break

    def _ready(self, req: LLMRequest, now: float) -> bool:
        host = self.host
        if host.tool_gap is not None and not host.tool_gap.ready(req):
            return False
        return host.prefetcher is None or host.prefetcher.ready(req, now)

    def _load_estimate_s(self, tier_name: str, n_blocks: int) -> float:
        host = self.host
        return sum(link.estimate_s(n_blocks * host.block_bytes) for link in host.links.load_path(tier_name))

    def _admit_one(self, req: LLMRequest, total_blocks: int, now: float, index: int = 0) -> bool:
        host = self.host
        cache: TieredCache = host.cache
        cost = host.cost
        bt = host.block_tokens
        prefetcher = host.prefetcher
        match = cache.match(req.prompt_keys, now)
        hbm_node, hbm_blocks = cache.hbm_prefix(match.node)
        segments = below_hbm_segments(cache, hbm_node, match.node) if match.hit_blocks > hbm_blocks else []
        if prefetcher is not None:
            # With a prefetch policy, tiers below DRAM are reached only through prefetch (HiCache):
            # what did not arrive in DRAM is recomputed.
            for cut, seg in enumerate(segments):
                if seg[0] is None or seg[0] >= 2:
                    segments = segments[:cut]
                    break
        matched_blocks = hbm_blocks + sum(seg[1] for seg in segments)
        # Peer HBM (same NVLink domain) may hold more of the prompt than this instance has.
        peer_blocks = 0
        if host.peers and host.links is not None:
            best = 0
            for peer in host.peers:
                best = max(best, peer.cache.peek(req.prompt_keys)[0])
            if best > matched_blocks:
                peer_blocks = best - matched_blocks
        usable = max(0, (req.prompt_tokens - 1) // bt)  # at least one prompt token is computed
        # Options: load the first k segments (peer blocks count as a last segment).
        names = [cache.tiers[seg[0]].name for seg in segments]
        sizes = [seg[1] for seg in segments]
        if peer_blocks and len(segments) == len(sizes) and sum(sizes) + hbm_blocks == matched_blocks:
            names.append("peer_hbm")
            sizes.append(peer_blocks)
        options = []
        load_s = 0.0
        loaded = hbm_blocks
        top = min(usable, hbm_blocks + sum(sizes))
        for k in range(len(sizes) + 1):
            if k:
                load_s += self._load_estimate_s(names[k - 1], sizes[k - 1])
                loaded += sizes[k - 1]
            rest = max(0, min(top, usable) - min(loaded, top))
            recompute_s = cost.prefill_s(rest * bt, min(loaded, top) * bt)
            options.append((load_s, recompute_s))
        k = host.load_rule.choose(options) if sizes else 0
        local_k = min(k, len(segments))
        deepest = segments[local_k - 1][2] if local_k else hbm_node
        load_blocks = cache.begin_load(deepest) if local_k else 0
        cache.pin(deepest)
        need = total_blocks - hbm_blocks
        if not cache.reserve(need, now):
            cache.unpin(deepest)
            if load_blocks:
                cache.cancel_load(deepest)
            return False
        if index:
            del host.waiting[index]
        else:
            host.waiting.popleft()
        pf = prefetcher.end(req) if prefetcher is not None else None
        peer_used = peer_blocks if k > len(segments) else 0
        cached = hbm_blocks + load_blocks
        hit_tokens = min((cached + peer_used) * bt, req.prompt_tokens - 1)
        req.hit_tokens = hit_tokens
        req.admitted_s = now
        tier_hits = req.tier_hit_tokens
        tier_hits["hbm"] = min(hbm_blocks * bt, hit_tokens)
        remaining = hit_tokens - tier_hits["hbm"]
        jobs = []
        for seg, name in zip(segments[:local_k], names):
            take = min(seg[1] * bt, remaining)
            tier_hits[name] = tier_hits.get(name, 0) + take
            remaining -= take
            jobs.append((name, seg[1]))
        if peer_used:
            tier_hits["peer_hbm"] = remaining
            jobs.append(("peer_hbm", peer_used))
        if pf is not None:
            # Prefetched blocks are served from DRAM but came from a lower tier: count them there.
            for origin, blocks in pf.staged.items():
                moved = min(tier_hits.get("dram", 0), blocks * bt)
                if moved > 0:
                    tier_hits["dram"] -= moved
                    tier_hits[origin] = tier_hits.get(origin, 0) + moved
                    host.tier_stats["prefetch_served_tokens"] += moved
        state = Running(req, deepest, cached, need - load_blocks, hit_tokens)
        if jobs:
            state.loaded = False
        host.batch.join(state)
        if jobs:
            host.start_load(state, deepest, load_blocks, jobs)
        return True
