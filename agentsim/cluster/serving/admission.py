"""Admission: which waiting requests join the batch, with which cached prefix and reservation.

Cache protocol per request (order fixed, see the policies reference section 1.3): MATCH the
prompt's blocks (path-touch) -> PIN the matched prefix -> RESERVE blocks for the new prompt and
output tokens (may evict, never the pinned prefix) -> prefill/decode -> COMMIT -> UNPIN. A
request that can never fit (more blocks than the cache holds) is rejected at once, with reason
``kv_capacity``; one that does not fit now waits (FCFS, head of line). A waiting request that
nothing will ever let in (a plugin that never frees its pins) is ended by the run's drain limit
(:mod:`agentsim.engine.simulation`, reason ``drain_limit``), so no run waits for ever.

:class:`PlainAdmission` serves a single-tier :class:`~agentsim.cache.radix.RadixCache`.
:class:`TieredAdmission` serves a :class:`~agentsim.cache.tiers.TieredCache`: it sees the
per-tier breakdown of the matched prefix, and its load rule
(:data:`~agentsim.cluster.serving.load_rules.LOAD_RULES`, cost-model comparison by default)
picks how much of the below-HBM part to load rather than recompute. Loaded blocks are reserved
in HBM with the rest; the instance runs the load. Peer HBM hits come over NVLink from an
instance of the same NVLink domain, over both NICs from another rack (``host.peer_links``); hits
in another instance's share of a shared remote store over the store link and the NIC. With a prefetcher or return prefetches, requests not ready yet are
skipped (others behind them may be scheduled).

An admission object uses of its instance: ``env``, ``cache``, ``cost``, ``block_tokens``,
``waiting``, ``batch``, ``max_batch``, ``on_finish``, and for the tiered kind also ``links``,
``peers``, ``peer_links``, ``store_peers``, ``store_tier``, ``load_rule``, ``prefetcher``, ``tool_gap``, ``tier_stats`` and ``kv_loader``.
"""

from __future__ import annotations

from agentsim.cache.tiers import TieredCache
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.batch import Running
from agentsim.cluster.serving.movement import below_hbm_segments, tier_prefix_blocks
from agentsim.cluster.serving.queue_causes import KV, LOAD, SLOT, STEP


#: Why a call was not served, as ``LLMRequest.reject_reason`` and the requests table's
#: ``reject_reason`` column say it: its prompt and output need more KV blocks than the instance
#: holds (disaggregated: ``prefill_`` or ``decode_`` says which pool's worker), or it was still
#: waiting or running when the run's drain limit ended the run.
REJECT_REASONS = ("kv_capacity", "prefill_kv_capacity", "decode_kv_capacity", "drain_limit")


def demand(req: LLMRequest, block_tokens: int) -> tuple[list[int], int, int]:
    """(keys to match, tokens whose KV it needs before producing its next token, output tokens
    left) of a waiting request: its prompt, or after a preemption its prompt and output so far."""
    if req.resume_output_left < 0:
        return req.prompt_keys, req.prompt_tokens, req.output_tokens
    tokens = req.resume_tokens
    return req.total_keys[:tokens // block_tokens], tokens, req.resume_output_left


def newly_pinned_blocks(node, hbm_only: bool) -> int:
    """Blocks on the path of ``node``, just pinned once, that no other pin held before.

    A node's pin count is at least its children's (a pin covers the whole path), so the nodes
    pinned only by this pin are a run from ``node`` upwards. ``hbm_only``: count the
    HBM-resident nodes of a tiered cache only."""
    blocks = 0
    while node.parent is not None and node.lock_ref == 1:
        if not hbm_only or node.entries[0] is not None:
            blocks += len(node.keys)
        node = node.parent
    return blocks


class Admission:
    """Admits waiting requests into the batch of ``host`` while they fit; :meth:`admit`
    returns why the rest waits (a :mod:`~agentsim.cluster.serving.queue_causes` cause)."""

    def __init__(self, host):
        self.host = host

    def admit(self) -> int:
        raise NotImplementedError

    def _reject(self, req: LLMRequest, now: float, reason: str = "kv_capacity") -> None:
        if req.background:
            self.host.background_active -= 1
        req.rejected = True
        req.reject_reason = reason
        req.finish_s = now
        self.host.on_finish(req)

    def _admitted(self, req: LLMRequest, state: Running, now: float, sequence_tokens: int,
                  tier_hits: dict | None = None) -> None:
        """Bookkeeping of an admission (first or after a preemption). ``tier_hits``: this
        admission's hit tokens by tier (tiered caches)."""
        host = self.host
        host.queue_causes.charge(req, now)
        state.chunk_wait = now
        if req.admitted_s != req.admitted_s:   # first admission (nan)
            req.admitted_s = now
        if req.resume_output_left >= 0:
            resume(req, state, sequence_tokens, tier_hits)
        elif req.remote_prefill and host.kv_handoff is not None:
            host.kv_handoff.receive(state)   # a prefill worker computes the prompt: its KV comes over


def resume(req: LLMRequest, state: Running, sequence_tokens: int, tier_hits: dict | None = None) -> None:
    """Turn a re-admitted request's state into a re-prefill of its prompt and output so far.

    The request's hit and prefilled tokens keep describing how its prompt was first served:
    hitting the blocks its own preempted run committed is not prefix reuse (counting it would
    make a cache under preemption look better), and tokens it had computed (or hit) before and
    now computes again are counted in ``preempted_recompute_tokens`` instead. Only prompt
    tokens it had neither hit nor computed before and now hits, because another request
    committed them meanwhile, are added to its hits (to this admission's deepest tiers in
    ``tier_hits``); hit and prefilled tokens still sum to the prompt once it is done."""
    hit = state.context_tokens               # the hit of this admission, over prompt + output so far
    # As at a first admission, at most prompt - 1 prompt tokens count as hit.
    prompt_hit = hit if hit < req.prompt_tokens - 1 else req.prompt_tokens - 1
    covered = req.hit_tokens + req.prefilled_tokens     # prompt tokens hit or computed before
    extra = prompt_hit - covered if prompt_hit > covered else 0
    if extra:
        req.hit_tokens += extra
        if req.tier_hit_tokens and tier_hits:
            # The newly hit tokens lie at the end of this admission's hit path: deepest tiers.
            left = extra
            for name in reversed(list(tier_hits)):
                take = min(left, tier_hits[name])
                if take > 0:
                    req.tier_hit_tokens[name] = req.tier_hit_tokens.get(name, 0) + take
                    left -= take
                if not left:
                    break
            if left:
                req.tier_hit_tokens["hbm"] = req.tier_hit_tokens.get("hbm", 0) + left
    req.preempted_recompute_tokens += max(0, req.resume_computed_tokens - hit)
    state.prefill_left = sequence_tokens - hit
    state.output_left = req.resume_output_left
    state.resumed = True
    # Prompt tokens still to be computed for the first time (credited to prefilled_tokens).
    state.prompt_left = req.prompt_tokens - req.hit_tokens - req.prefilled_tokens


class PlainAdmission(Admission):
    """FCFS admission over a single-tier radix cache."""

    def admit(self) -> int:
        host = self.host
        cache = host.cache
        now = host.env.now
        block_tokens = host.block_tokens
        waiting = host.waiting
        batch = host.batch
        max_batch = host.max_batch
        rule = host.kv_rule
        if not waiting:
            return STEP
        if not rule.begin_pass(host):
            return KV
        while waiting and len(batch.running) < max_batch:
            req = waiting[0]
            total_blocks = -(-(req.prompt_tokens + req.output_tokens) // block_tokens)
            if total_blocks > cache.capacity_blocks:
                waiting.popleft()
                self._reject(req, now)
                continue
            keys, tokens, output_left = demand(req, block_tokens)
            match = cache.match(keys, now)
            cached = match.hit_blocks
            cache.pin(match.node)
            need = rule.blocks_at_admission(tokens, total_blocks) - cached
            # At least one token is always computed (it produces the next output token).
            # (min(cached tokens, tokens - 1), spelled as a comparison: the builtin's argument
            # parsing is costly on this path.)
            hit_tokens = cached * block_tokens
            if tokens - 1 < hit_tokens:
                hit_tokens = tokens - 1
            # An idle instance admits the head request whenever the cache can reserve its
            # blocks: a rule's budget counts blocks pinned by an agentic policy (TTL pins) as
            # taken, yet the cache releases those under pressure, so refusing with nothing
            # running would wait for memory nothing will ever free.
            if not (rule.admits(need, tokens - hit_tokens, output_left, total_blocks - cached - need,
                                newly_pinned_blocks(match.node, False)) or not batch.running) \
                    or not cache.reserve(need, now):
                cache.unpin(match.node)
                return KV
            waiting.popleft()
            if req.resume_output_left < 0:
                req.hit_tokens = hit_tokens
            state = Running(req, match.node, cached, need, hit_tokens)
            self._admitted(req, state, now, tokens)
            batch.join(state)
        return SLOT if waiting else STEP


class TieredAdmission(Admission):
    """Admission over a tiered cache: load-or-recompute per below-HBM segment, peer-HBM hits,
    and (with a prefetcher or return prefetches) skipping requests that are held."""

    def __init__(self, host):
        super().__init__(host)
        #: True when some waiting requests may not be schedulable yet (prefetch stop rules, own
        #: return prefetch in flight): admission then skips them instead of taking the head.
        self.holds = host.prefetcher is not None or (host.tool_gap is not None and host.tool_gap.holds)

    def admit(self) -> int:
        host = self.host
        if not host.waiting:
            return STEP
        if not host.kv_rule.begin_pass(host):
            return KV
        if self.holds:
            return self._admit_with_holds()
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
                return KV
        return SLOT if waiting else STEP

    def _admit_with_holds(self) -> int:
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
                # An idle instance must not wait for HBM that only the pins of prefetches queued
                # behind this request hold (nothing would release them): end those, try again.
                if (host.batch.running or host.loading or host.prefetcher is None
                        or not host.prefetcher.release_others(req)):
                    return KV
        if i < len(waiting):
            return SLOT
        return LOAD if waiting else STEP

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
        keys, tokens, output_left = demand(req, bt)
        match = cache.match(keys, now)
        hbm_node, hbm_blocks = cache.hbm_prefix(match.node)
        segments = below_hbm_segments(cache, hbm_node, match.node) if match.hit_blocks > hbm_blocks else []
        if prefetcher is not None:
            # With a prefetch policy, tiers below the host tier are reached only through prefetch
            # (HiCache): what did not arrive in the host tier is recomputed.
            staging = cache.staging_tier
            for cut, seg in enumerate(segments):
                if seg[0] is None or seg[0] > staging:
                    segments = segments[:cut]
                    break
        matched_blocks = hbm_blocks + sum(seg[1] for seg in segments)
        # Another instance's HBM may hold more of the prompt than this instance has; the first
        # peer with the longest match is the source (peers list the same NVLink domain first).
        peer_blocks = 0
        peer_links = None
        if host.peers and host.links is not None:
            best = 0
            source = None
            for peer in host.peers:
                held = peer.cache.peek(keys)[0]
                if held > best:
                    best, source = held, peer
            if best > matched_blocks:
                peer_blocks = best - matched_blocks
                peer_links = host.peer_links.get(source.instance_id)
        # A shared remote store: another instance's share may hold more of the prompt.
        store_blocks = 0
        if host.store_peers and prefetcher is None:  # with a prefetch policy the store is reached by prefetch only
            tier = host.store_tier
            best = 0
            for peer in host.store_peers:
                held = tier_prefix_blocks(peer.cache, keys, tier)
                if held > best:
                    best = held
            if best > matched_blocks:
                store_blocks = best - matched_blocks
        usable = max(0, (tokens - 1) // bt)  # at least one token is computed
        # Options: load the first k segments; blocks from another instance (its HBM, or its
        # share of a shared store: the longer run, HBM on a tie) count as a last segment.
        names = [cache.tiers[seg[0]].name for seg in segments]
        sizes = [seg[1] for seg in segments]
        extra_name, extra_blocks = None, 0
        if peer_blocks and peer_blocks >= store_blocks:
            extra_name, extra_blocks = "peer_hbm", peer_blocks
        elif store_blocks:
            extra_name, extra_blocks = "remote", store_blocks
        if extra_name is not None:
            names.append(extra_name)
            sizes.append(extra_blocks)
        options = []
        load_s = 0.0
        loaded = hbm_blocks
        top = min(usable, hbm_blocks + sum(sizes))
        for k in range(len(sizes) + 1):
            if k:
                if k > len(segments) and extra_name == "peer_hbm" and peer_links:
                    load_s += max(link.estimate_s(sizes[k - 1] * host.block_bytes) for link in peer_links)
                else:
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
        need = host.kv_rule.blocks_at_admission(tokens, total_blocks) - hbm_blocks
        extra_used = extra_blocks if k > len(segments) else 0
        cached = hbm_blocks + load_blocks
        hit_tokens = min((cached + extra_used) * bt, tokens - 1)
        # As in plain admission: an idle instance admits whatever the cache can reserve.
        if not (host.kv_rule.admits(need, tokens - hit_tokens, output_left, total_blocks - hbm_blocks - need,
                                    newly_pinned_blocks(deepest, True)) or not host.batch.running) \
                or not cache.reserve(need, now):
            cache.unpin(deepest)
            if load_blocks:
                cache.cancel_load(deepest)
            return False
        if index:
            del host.waiting[index]
        else:
            host.waiting.popleft()
        pf = prefetcher.end(req) if prefetcher is not None else None
        resuming = req.resume_output_left >= 0
        if resuming:
            tier_hits = {}          # this admission's; resume() decides what the request keeps
        else:
            req.hit_tokens = hit_tokens
            tier_hits = req.tier_hit_tokens
        tier_hits["hbm"] = min(hbm_blocks * bt, hit_tokens)
        remaining = hit_tokens - tier_hits["hbm"]
        jobs = []
        swapped_back = req.resume_output_left >= 0 and req.swap_preemptions > 0
        for seg, name in zip(segments[:local_k], names):
            take = min(seg[1] * bt, remaining)
            tier_hits[name] = tier_hits.get(name, 0) + take
            remaining -= take
            jobs.append((name, seg[1]))
            if swapped_back and seg[0] == cache.staging_tier:
                host.kv_stats["swapped_in_blocks"] += seg[1]
        if extra_used:
            tier_hits[extra_name] = tier_hits.get(extra_name, 0) + remaining
            jobs.append((extra_name, extra_used))
            if extra_name == "remote":
                host.tier_stats["shared_store_hit_blocks"] += extra_used
        if pf is not None:
            # Prefetched blocks are served from the host tier but came from a lower tier: count
            # them there.
            host_name = cache.tiers[cache.staging_tier].name
            for origin, blocks in pf.staged.items():
                moved = min(tier_hits.get(host_name, 0), blocks * bt)
                if moved > 0:
                    tier_hits[host_name] -= moved
                    tier_hits[origin] = tier_hits.get(origin, 0) + moved
                    host.tier_stats["prefetch_served_tokens"] += moved
        state = Running(req, deepest, cached, need - load_blocks, hit_tokens)
        self._admitted(req, state, now, tokens, tier_hits)
        if jobs:
            state.loaded = False
        host.batch.join(state)
        if jobs:
            host.kv_loader.start(state, deepest, load_blocks, jobs, peer_links if extra_name == "peer_hbm" else None)
        return True
