"""A serving instance: a waiting queue and a continuously batched running set over one KV cache.

Time advances per batch iteration while any request is prefilling (chunked prefill under a token
budget), and per *change of batch membership* while the batch only decodes: a decode-only stretch
is timed in closed form up to the next completion and cut short (at a step boundary) only when a
new request arrives that could join. Nothing is simulated per token per request.

Cache protocol per request (order fixed, see the policies reference section 1.3): MATCH the
prompt's blocks (path-touch) -> PIN the matched prefix -> RESERVE blocks for the new prompt and
output tokens (may evict, never the pinned prefix) -> prefill/decode -> COMMIT the prompt and
output blocks -> UNPIN. A request that can never fit (more blocks than the cache holds) is
rejected; one that does not fit now waits (FCFS, head of line).

With a memory hierarchy (a :class:`~agentsim.cache.tiers.TieredCache` and a
:class:`~agentsim.cluster.topology.InstanceLinks`), admission sees the per-tier breakdown of the
matched prefix; the load rule (:data:`LOAD_RULES`, cost-model comparison by default) picks how
much of the below-HBM part to load rather than recompute. Loaded blocks are reserved in HBM
with the rest; the request's prefill waits for the load (or overlaps it layer by layer, in which
case only its first token waits). Disk and remote hits stage through DRAM (two transfers). Peer
HBM hits (another instance of the NVLink domain) come over NVLink. TTFT = queue + load + prefill.

Prefetch (``cache.tiers.prefetch``, HiCache section 2.3 of the policies reference): when a
request arrives, the part of its prefix found only below DRAM (disk, remote) is staged into
DRAM chunk by chunk if it is at least ``threshold_tokens`` long. The stop rule decides when the
request may be scheduled: ``best_effort`` as soon as it otherwise would be, ``wait_complete``
when the whole prefetch arrived, ``timeout`` at the earlier of the two and
``timeout_base_s + timeout_per_ki_token_s * tokens / 1024`` after arrival. Requests not ready
yet are skipped (others behind them may be scheduled). Whatever arrived is loaded from DRAM;
the rest is recomputed (with a prefetch policy, lower tiers are reached only by prefetch, as in
HiCache). Served prefetched tokens count as hits of the tier they came from.

Tool-gap movement (``cache.tiers.on_tool_call: demote``, ``prefetch_before_return``): when a
call ends in a tool or human pause, the agent's private HBM chain is swapped out to DRAM right
after its unpin, and ``return_lead_s`` before the pre-sampled return its below-HBM KV is loaded
back into HBM; the agent's next call waits for that load if it arrives first.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Callable

import simpy

from agentsim.cache.radix import Node, RadixCache
from agentsim.cache.tiers import TieredCache
from agentsim.cluster.costmodel import RooflineCostModel
from agentsim.cluster.request import LLMRequest
from agentsim.registry import Registry

LOAD_RULES: Registry = Registry("load rule")


class LoadRule:
    """Chooses how many of the below-HBM segments (in path order) to load; the rest is recomputed.

    ``options`` is a list, per cut k = 0..K, of (load_s, recompute_s) estimates: loading the first
    k segments and recomputing the remaining matched tokens. Returns k.
    """

    Params = None

    def __init__(self, params=None):
        self.params = params

    def choose(self, options: list[tuple[float, float]]) -> int:
        raise NotImplementedError


@LOAD_RULES.register("cost_model")
class CostModelRule(LoadRule):
    """The cut with the smallest estimated load + recompute time (ties: load more)."""

    def choose(self, options):
        best_k, best = 0, float("inf")
        for k, (load_s, recompute_s) in enumerate(options):
            if load_s + recompute_s <= best:
                best_k, best = k, load_s + recompute_s
        return best_k


@LOAD_RULES.register("always_load")
class AlwaysLoad(LoadRule):
    def choose(self, options):
        return len(options) - 1


@LOAD_RULES.register("never_load")
class NeverLoad(LoadRule):
    def choose(self, options):
        return 0


class _Running:
    """A request in the batch.

    While it prefills (or waits for its load), ``prefill_left``, ``context_tokens`` and
    ``output_left`` are kept up to date. Once it decodes, every decoding request advances by
    the same number of steps per iteration, so the instance advances one clock instead of
    touching each of them (see :class:`_DecodingSet`): its ``context_tokens`` and
    ``output_left`` are frozen at entry, and ``ctx_base`` and ``finish_clock`` say where it
    stands relative to that clock.
    """

    __slots__ = ("req", "node", "cached_blocks", "reserved_blocks", "prefill_left", "context_tokens", "output_left",
                 "loaded", "prefill_done_s", "seq", "ctx_base", "finish_clock")

    def __init__(self, req: LLMRequest, node: Node, cached_blocks: int, reserved_blocks: int, hit_tokens: int):
        self.seq = 0  # admission order on the instance (set when it joins the batch)
        self.req = req
        self.node = node
        self.cached_blocks = cached_blocks
        self.reserved_blocks = reserved_blocks
        self.prefill_left = req.prompt_tokens - hit_tokens
        self.context_tokens = hit_tokens
        self.output_left = req.output_tokens
        self.loaded = True
        self.prefill_done_s = float("nan")


class _DecodingSet:
    """The decoding requests of a batch (prefill done, KV loaded), advanced lazily.

    All of them take one step per iteration, so a shared ``clock`` (decode steps taken since
    the instance started) replaces per-request counters: a request that joined at clock c0
    with ``context_tokens`` x and ``output_left`` y has, at clock c, context x + (c - c0) and
    y - (c - c0) output tokens left. The batch totals the timing model needs are then O(1):
    ``len``, the summed context (``ctx_base_sum + len * clock``, ints, so exactly the sum a
    scan would give), and the fewest output tokens left (a heap of finish clocks). Without
    this every iteration touched every running request, which made the time per request
    grow with the batch size.
    """

    __slots__ = ("clock", "count", "ctx_base_sum", "finish_heap", "pending")

    def __init__(self):
        self.clock = 0
        self.count = 0
        self.ctx_base_sum = 0
        self.finish_heap: list[tuple[int, int, _Running]] = []
        #: Requests whose load arrived during an iteration: they join after that iteration's
        #: step (see :meth:`flush`), not taking a step they were not part of.
        self.pending: list[_Running] = []

    def flush(self) -> None:
        """Add the requests that became ready during the last iteration."""
        if self.pending:
            for state in self.pending:
                self.add(state)
            self.pending = []

    def add(self, state: _Running) -> None:
        """``state`` starts decoding now with its current context and output left."""
        state.ctx_base = state.context_tokens - self.clock
        state.finish_clock = state.output_left + self.clock
        self.count += 1
        self.ctx_base_sum += state.ctx_base
        heapq.heappush(self.finish_heap, (state.finish_clock, state.seq, state))

    def context_tokens(self) -> int:
        return self.ctx_base_sum + self.count * self.clock

    def min_output_left(self) -> int:
        return self.finish_heap[0][0] - self.clock

    def pop_finished(self) -> list[_Running]:
        """Remove and return the requests with no output left, in admission order."""
        heap = self.finish_heap
        done = []
        while heap and heap[0][0] <= self.clock:
            state = heapq.heappop(heap)[2]
            self.count -= 1
            self.ctx_base_sum -= state.ctx_base
            # Materialise its counters (as a per-request scan would have left them).
            state.context_tokens = state.ctx_base + self.clock
            state.output_left = state.finish_clock - self.clock
            done.append(state)
        if len(done) > 1:
            done.sort(key=lambda st: st.seq)
        return done


class _Prefetch:
    """One request's L3 -> DRAM prefetch (see the module docstring)."""

    __slots__ = ("pin", "deadline_s", "staged", "stopped", "finished")

    def __init__(self, pin, deadline_s: float):
        self.pin = pin
        self.deadline_s = deadline_s
        self.staged: dict[str, int] = {}   # blocks staged into DRAM by source tier name
        self.stopped = False
        self.finished = False


class ServingInstance:
    """One instance; ``on_finish(request)`` is called for every finished or rejected request."""

    def __init__(self, env: simpy.Environment, instance_id: int, cache: RadixCache, cost: RooflineCostModel,
                 block_tokens: int, max_batch_requests: int, prefill_chunk_tokens: int,
                 on_finish: Callable[[LLMRequest], None], check_invariants: bool = False,
                 links=None, load_rule: LoadRule | None = None, overlap_layers: bool = False, peers=None,
                 tiers_config=None):
        self.env = env
        self.instance_id = instance_id
        self.cache = cache
        self.cost = cost
        self.block_tokens = block_tokens
        self.max_batch = max_batch_requests
        self.chunk_tokens = prefill_chunk_tokens
        self.on_finish = on_finish
        self.check_invariants = check_invariants
        self.waiting: deque[LLMRequest] = deque()
        #: The batch in admission order; each is also either prefilling or loading
        #: (``_prefilling``, in admission order) or decoding (``_decoding``).
        self.running: list[_Running] = []
        self._prefilling: list[_Running] = []
        self._decoding = _DecodingSet()
        self._admitted = 0
        self.busy_s = 0.0
        self.iterations = 0
        self._wakeup = env.event()
        # Memory hierarchy (None/False for an HBM-only instance: the original fast path).
        self.tiered = isinstance(cache, TieredCache)
        self.links = links
        self.load_rule = load_rule if load_rule is not None else CostModelRule()
        self.overlap_layers = overlap_layers
        self.peers = peers or []          # instances of the same NVLink domain (peer-HBM hits)
        self.loading = 0
        self.block_bytes = block_tokens * cost.kv_bytes_per_token
        if self.tiered and links is not None:
            cache.on_transfer = self._on_cache_transfer
        #: ``before_unpin(request, deepest_node)``: called at a request's end after COMMIT and
        #: before UNPIN (set by the engine for tool-start events).
        self.before_unpin: Callable[[LLMRequest, Node], None] | None = None
        # Prefetch and tool-gap movement (see the module docstring); all off by default.
        self.prefetch_cfg = None
        self.tool_demote = False
        self.return_prefetch = False
        self.return_lead_s = 0.0
        self._prefetches: dict[int, _Prefetch] = {}   # request id -> its L3 prefetch
        self._returning: dict[int, int] = {}          # agent id -> in-flight return prefetches
        self._held_for_return: set[int] = set()       # request ids counted in return_waits
        self.tier_stats = {"prefetches": 0, "prefetch_wanted_blocks": 0, "prefetch_staged_blocks": 0,
                           "prefetch_served_tokens": 0, "tool_demoted_blocks": 0, "return_prefetches": 0,
                           "return_prefetched_blocks": 0, "return_prefetch_failed": 0, "return_waits": 0}
        if self.tiered and tiers_config is not None and links is not None:
            names = [tier.name for tier in cache.tiers]
            if tiers_config.prefetch.policy != "none" and len(names) > 2 and names[1] == "dram":
                self.prefetch_cfg = tiers_config.prefetch
                self.prefetch_chunk_blocks = max(1, tiers_config.prefetch.chunk_tokens // block_tokens)
            self.tool_demote = tiers_config.on_tool_call == "demote" and len(names) > 1
            self.return_prefetch = bool(tiers_config.prefetch_before_return) and len(names) > 1
            self.return_lead_s = float(tiers_config.return_lead_s)
        #: True when some waiting requests may not be schedulable yet (prefetch stop rules, own
        #: return prefetch in flight): admission then skips them instead of taking the head.
        self.holds = self.prefetch_cfg is not None or self.return_prefetch
        self.process = env.process(self._loop())

    # --- interface for the router ----------------------------------------------------------
    def submit(self, request: LLMRequest) -> None:
        request.instance = self.instance_id
        self.waiting.append(request)
        if self.prefetch_cfg is not None:
            self._start_prefetch(request)
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    # --- scheduling ---------------------------------------------------------------------------
    def _admit(self) -> None:
        if self.holds:
            self._admit_with_holds()
            return
        cache = self.cache
        now = self.env.now
        block_tokens = self.block_tokens
        while self.waiting and len(self.running) < self.max_batch:
            req = self.waiting[0]
            total_blocks = -(-(req.prompt_tokens + req.output_tokens) // block_tokens)
            if total_blocks > cache.capacity_blocks:
                self.waiting.popleft()
                req.rejected = True
                req.finish_s = now
                self.on_finish(req)
                continue
            if self.tiered:
                if not self._admit_tiered(req, total_blocks, now):
                    break
                continue
            match = cache.match(req.prompt_keys, now)
            cached = match.hit_blocks
            cache.pin(match.node)
            need = total_blocks - cached
            if not cache.reserve(need, now):
                cache.unpin(match.node)
                break
            self.waiting.popleft()
            # At least one prompt token is always computed (it produces the first output token).
            # (min(cached tokens, prompt - 1), spelled as a comparison: the builtin's argument
            # parsing is costly on this path; likewise below.)
            hit_tokens = cached * block_tokens
            if req.prompt_tokens - 1 < hit_tokens:
                hit_tokens = req.prompt_tokens - 1
            req.hit_tokens = hit_tokens
            req.admitted_s = now
            self._join(_Running(req, match.node, cached, need, hit_tokens))

    def _admit_with_holds(self) -> None:
        """Tiered admission when some waiting requests are held (prefetch stop rule, return
        prefetch): FCFS among the ready ones, skipping held ones."""
        cache = self.cache
        now = self.env.now
        block_tokens = self.block_tokens
        waiting = self.waiting
        i = 0
        while i < len(waiting) and len(self.running) < self.max_batch:
            req = waiting[i]
            if not self._ready(req, now):
                i += 1
                continue
            total_blocks = -(-(req.prompt_tokens + req.output_tokens) // block_tokens)
            if total_blocks > cache.capacity_blocks:
                del waiting[i]
                self._end_prefetch(req)
                req.rejected = True
                req.finish_s = now
                self.on_finish(req)
                continue
            if not self._admit_tiered(req, total_blocks, now, index=i):
                break

    def _ready(self, req: LLMRequest, now: float) -> bool:
        if self._returning and req.agent_id in self._returning:
            if req.request_id not in self._held_for_return:
                self._held_for_return.add(req.request_id)
                self.tier_stats["return_waits"] += 1
            return False
        pf = self._prefetches.get(req.request_id)
        if pf is None or pf.finished:
            return True
        policy = self.prefetch_cfg.policy
        if policy == "best_effort":
            return True
        return policy == "timeout" and now >= pf.deadline_s

    def _wake(self) -> None:
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    # --- prefetch (HiCache L3 -> DRAM) ----------------------------------------------------------
    def _start_prefetch(self, req: LLMRequest) -> None:
        cache: TieredCache = self.cache
        now = self.env.now
        match = cache.match(req.prompt_keys, now, touch=False)
        run_blocks = 0
        deepest = None
        for node in cache.path(match.node):
            if node.entries[0] is None and node.entries[1] is None and not node.loading:
                run_blocks += len(node.keys)
                deepest = node
            elif deepest is not None:
                break   # the L3 run continuing the local (HBM + DRAM) match ends here
        cfg = self.prefetch_cfg
        tokens = run_blocks * self.block_tokens
        if deepest is None or tokens < cfg.threshold_tokens:
            return
        pf = _Prefetch(cache.begin_prefetch(deepest), now + cfg.timeout_base_s + cfg.timeout_per_ki_token_s * tokens / 1024)
        self._prefetches[req.request_id] = pf
        self.tier_stats["prefetches"] += 1
        self.tier_stats["prefetch_wanted_blocks"] += run_blocks
        self.env.process(self._prefetch_run(pf))
        if cfg.policy == "timeout":
            self.env.process(self._wake_at(pf.deadline_s))

    def _wake_at(self, at_s: float):
        yield self.env.timeout(max(0.0, at_s - self.env.now))
        self._wake()

    def _prefetch_run(self, pf: "_Prefetch"):
        """Stage the pinned path's L3-only blocks into DRAM, one chunk at a time, until done or
        stopped (a chunk still in flight when the request is scheduled is discarded)."""
        cache: TieredCache = self.cache
        env = self.env
        chunk = self.prefetch_chunk_blocks
        while not pf.stopped:
            nxt = cache.next_to_stage(pf.pin)
            if nxt is None or nxt[1] is None:
                break
            node, src = nxt
            first_block = node.start_block
            n = min(len(node.keys), chunk)
            name = cache.tiers[src].name
            for link in self.links.load_path(name)[:-1]:   # into DRAM: every hop but the last (h2d)
                yield link.transfer(n * self.block_bytes)
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
                self.tier_stats["prefetch_staged_blocks"] += staged
            if not staged_any:
                break   # DRAM had no room: stop here
        pf.finished = True
        self._wake()

    def _end_prefetch(self, req: LLMRequest) -> "_Prefetch | None":
        pf = self._prefetches.pop(req.request_id, None) if self._prefetches else None
        if pf is not None:
            pf.stopped = True
            self.cache.end_prefetch(pf.pin)
        return pf

    # --- tool-gap movement ----------------------------------------------------------------------
    def _tool_gap(self, req: LLMRequest, node) -> None:
        """The agent pauses for ``req.next_gap_s``: swap its private KV out, schedule the return."""
        gap = req.next_gap_s
        now = self.env.now
        if self.tool_demote and not (self.return_prefetch and gap <= self.return_lead_s):
            self.tier_stats["tool_demoted_blocks"] += self.cache.swap_out_path(node, now)
        if self.return_prefetch and gap == gap:
            self.env.process(self._return_prefetch(req.agent_id, req.total_keys, max(0.0, gap - self.return_lead_s)))

    def _return_prefetch(self, agent_id: int, keys: list[int], delay_s: float):
        """Load the agent's below-HBM KV back into HBM ``delay_s`` from now (before its return)."""
        env = self.env
        if delay_s > 0:
            yield env.timeout(delay_s)
        cache: TieredCache = self.cache
        now = env.now
        match = cache.match(keys, now, touch=False)
        hbm_node, hbm_blocks = cache.hbm_prefix(match.node)
        if match.hit_blocks <= hbm_blocks:
            return
        segments = self._segments(hbm_node, match.node)
        if not segments or segments[0][0] is None:
            return
        deepest = segments[-1][2]
        n_blocks = cache.begin_load(deepest)
        cache.pin(deepest)
        if not cache.reserve(n_blocks, now):
            cache.unpin(deepest)
            cache.cancel_load(deepest)
            self.tier_stats["return_prefetch_failed"] += 1
            return
        self._returning[agent_id] = self._returning.get(agent_id, 0) + 1
        self.tier_stats["return_prefetches"] += 1
        procs = [env.process(self._load_path(cache.tiers[src].name, blocks * self.block_bytes))
                 for src, blocks, _ in segments]
        yield simpy.AllOf(env, procs)
        cache.finish_load(deepest, n_blocks, env.now)
        cache.unpin(deepest)
        self.tier_stats["return_prefetched_blocks"] += n_blocks
        left = self._returning[agent_id] - 1
        if left:
            self._returning[agent_id] = left
        else:
            del self._returning[agent_id]
        if self.check_invariants:
            cache.check_invariants()
        self._wake()

    # --- memory hierarchy ---------------------------------------------------------------------
    def _on_cache_transfer(self, src: str, dst: str, n_blocks: int) -> None:
        """Copies down (demotion, write-through) occupy links; the cache accounted them already."""
        link = self.links.write_link(src, dst)
        if link is not None:
            link.transfer(n_blocks * self.block_bytes)

    def _segments(self, start: Node, deepest: Node) -> list[tuple[int, int, Node]]:
        """Below-HBM nodes from ``start`` (exclusive) to ``deepest`` grouped into runs of equal
        source tier: [(tier, blocks, last node)]; stops at a node another load is bringing in."""
        cache: TieredCache = self.cache
        path = []
        node = deepest
        while node is not start and node.parent is not None:
            path.append(node)
            node = node.parent
        segments: list[list] = []
        for node in reversed(path):
            if node.loading:
                break
            src = cache.source_tier(node)
            if segments and segments[-1][0] == src:
                segments[-1][1] += len(node.keys)
                segments[-1][2] = node
            else:
                segments.append([src, len(node.keys), node])
        return [tuple(seg) for seg in segments]

    def _load_estimate_s(self, tier_name: str, n_blocks: int) -> float:
        return sum(link.estimate_s(n_blocks * self.block_bytes) for link in self.links.load_path(tier_name))

    def _admit_tiered(self, req: LLMRequest, total_blocks: int, now: float, index: int = 0) -> bool:
        cache: TieredCache = self.cache
        cost = self.cost
        bt = self.block_tokens
        match = cache.match(req.prompt_keys, now)
        hbm_node, hbm_blocks = cache.hbm_prefix(match.node)
        segments = self._segments(hbm_node, match.node) if match.hit_blocks > hbm_blocks else []
        if self.prefetch_cfg is not None:
            # With a prefetch policy, tiers below DRAM are reached only through prefetch (HiCache):
            # what did not arrive in DRAM is recomputed.
            for cut, seg in enumerate(segments):
                if seg[0] is None or seg[0] >= 2:
                    segments = segments[:cut]
                    break
        matched_blocks = hbm_blocks + sum(seg[1] for seg in segments)
        # Peer HBM (same NVLink domain) may hold more of the prompt than this instance has.
        peer_blocks = 0
        if self.peers and self.links is not None:
            best = 0
            for peer in self.peers:
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
        k = self.load_rule.choose(options) if sizes else 0
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
            del self.waiting[index]
        else:
            self.waiting.popleft()
        pf = self._end_prefetch(req) if self.prefetch_cfg is not None else None
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
                    self.tier_stats["prefetch_served_tokens"] += moved
        state = _Running(req, deepest, cached, need - load_blocks, hit_tokens)
        if jobs:
            state.loaded = False
        self._join(state)
        if jobs:
            self.loading += 1
            self.env.process(self._load(state, deepest, load_blocks, jobs))
        return True

    def _join(self, state: _Running) -> None:
        """Add an admitted request to the batch."""
        state.seq = self._admitted
        self._admitted += 1
        self.running.append(state)
        if state.prefill_left > 0:
            self._prefilling.append(state)
        elif state.loaded:
            self._decoding.add(state)

    def _load(self, state: _Running, deepest: Node, load_blocks: int, jobs: list[tuple[str, int]]):
        """Move the chosen blocks up (all sources in parallel; disk/remote stage through DRAM)."""
        env = self.env
        procs = [env.process(self._load_path(name, n_blocks * self.block_bytes)) for name, n_blocks in jobs]
        yield simpy.AllOf(env, procs)
        now = env.now
        if load_blocks:
            self.cache.finish_load(deepest, load_blocks, now)
        req = state.req
        req.loaded_bytes = sum(n for _, n in jobs) * self.block_bytes
        req.load_done_s = now
        state.loaded = True
        self.loading -= 1
        if state.prefill_left == 0:  # overlapped prefill already finished: first token now
            req.first_token_s = now
            state.output_left -= 1
            state.context_tokens += 1
            self._decoding.pending.append(state)  # joins after the iteration in progress, if any
        if self.check_invariants:
            self.cache.check_invariants()
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def _load_path(self, tier_name: str, size_bytes: float):
        for link in self.links.load_path(tier_name):
            yield link.transfer(size_bytes)

    def _finish(self, state: _Running) -> None:
        req = state.req
        now = self.env.now
        admission = getattr(self.cache, "admission", None)
        if admission is not None and not admission.caches_decode:
            # A1 "do not cache decode": only the prompt's blocks stay; the reservation of the
            # output blocks is returned by the commit.
            keys = req.prompt_keys[state.cached_blocks:]
            admission.rejected_blocks += len(req.total_keys) - len(req.prompt_keys)
        else:
            keys = req.total_keys[state.cached_blocks:]
        node = self.cache.commit(state.node, keys, state.cached_blocks, state.reserved_blocks, now)
        if self.before_unpin is not None:
            # Agentic policies (TTL-pin, InferCept, KVFlow) see the paused agent's deepest node
            # while the request still pins it, so a TTL-pin can take over without a gap.
            # A tiered cache's HBM policy works on per-tier entries, not tree nodes.
            self.before_unpin(req, node.entries[0] if self.tiered else node)
        self.cache.unpin(node)
        if (self.tool_demote or self.return_prefetch) and req.next_gap_kind in ("tool", "human") and req.agent_id >= 0:
            self._tool_gap(req, node)
        req.finish_s = now
        self.on_finish(req)

    def _complete(self) -> None:
        """Finish the requests with no output left, in admission order."""
        if self._decoding.finish_heap and self._decoding.min_output_left() <= 0:
            finished = self._decoding.pop_finished()
            # One list rebuild per completion, not per iteration.
            gone = {state.seq for state in finished}
            self.running = [state for state in self.running if state.seq not in gone]
            for state in finished:
                self._finish(state)
        if self.check_invariants:
            self.cache.check_invariants()

    def _loop(self):
        env = self.env
        cost = self.cost
        decoding = self._decoding
        while True:
            self._admit()
            decoding.flush()
            # Arrivals so far have been considered; only later ones should wake us.
            if self._wakeup.triggered:
                self._wakeup = env.event()
            if not self.running:
                yield self._wakeup
                continue
            if self.loading:
                prefilling = self._prefilling if self.overlap_layers else [s for s in self._prefilling if s.loaded]
                if not prefilling and not decoding.count:
                    yield self._wakeup  # everything waits on loads
                    continue
            else:
                prefilling = self._prefilling
            if prefilling:
                yield from self._prefill_iteration(prefilling, cost)
            else:
                yield from self._decode_stretch(cost)
            decoding.flush()
            self._complete()

    def _prefill_iteration(self, prefilling: list[_Running], cost: RooflineCostModel):
        env = self.env
        decoding = self._decoding
        n_decoding = decoding.count
        budget = self.chunk_tokens - n_decoding
        if not budget > 1:  # max(1, budget)
            budget = 1
        chunks = []
        shapes = []
        for state in prefilling:
            if budget <= 0:
                break
            n = budget if budget < state.prefill_left else state.prefill_left  # min(prefill_left, budget)
            budget -= n
            shapes.append((n, state.context_tokens))
            chunks.append((state, n))
        duration = cost.iteration_s(shapes, n_decoding, decoding.context_tokens())
        yield env.timeout(duration)
        self.busy_s += duration
        self.iterations += 1
        now = env.now
        decoding.clock += 1  # the decoding requests' step; those finishing prefill now join after it
        prefill_done = False
        for state, n in chunks:
            state.prefill_left -= n
            state.req.prefilled_tokens += n
            state.context_tokens += n
            if state.prefill_left == 0:
                prefill_done = True
                state.prefill_done_s = now
                if state.loaded:
                    state.req.first_token_s = now
                    state.output_left -= 1
                    state.context_tokens += 1
                    decoding.add(state)
        if prefill_done:
            self._prefilling = [s for s in self._prefilling if s.prefill_left > 0]

    def _decode_stretch(self, cost: RooflineCostModel):
        env = self.env
        # Only decoding requests are left (no prefill is possible now), loads aside.
        decoding = self._decoding
        n = decoding.count
        context = decoding.context_tokens()
        steps = decoding.min_output_left()
        start = env.now
        full_s = cost.decode_stretch_s(n, context, steps)
        timeout = env.timeout(full_s)
        if len(self.running) < self.max_batch or self.loading:
            result = yield timeout | self._wakeup
            if timeout not in result:
                # A request arrived: finish the step in progress, then let it join.
                done = cost.decode_steps_within(n, context, env.now - start)
                if done + 1 < steps:  # steps = min(steps, done + 1)
                    steps = done + 1
                end = start + cost.decode_stretch_s(n, context, steps)
                if end > env.now:
                    yield env.timeout(end - env.now)
        else:
            yield timeout
        self.busy_s += env.now - start
        self.iterations += steps
        decoding.clock += steps
