"""A serving instance: a waiting queue and a continuously batched running set over one KV cache.

Time advances per batch iteration while any request is prefilling (chunked prefill under a token
budget), and per *change of batch membership* while the batch only decodes: a decode-only stretch
is timed in closed form up to the next completion and cut short (at a step boundary) only when a
new request arrives that could join. Nothing is simulated per token per request.

The instance keeps only this batch loop. It is given its collaborators: the batch state
(:class:`~agentsim.cluster.serving.batch.Batch`), admission
(:mod:`~agentsim.cluster.serving.admission`: which waiting requests join, what they hit and
reserve, what they load from lower tiers), the prefetcher
(:mod:`~agentsim.cluster.serving.prefetch`), tool-gap movement
(:mod:`~agentsim.cluster.serving.toolgap`) and the KV loader
(:mod:`~agentsim.cluster.serving.kv_load`: loads into HBM from lower tiers and peers). With a
memory hierarchy the request's prefill waits for its load (or overlaps it layer by layer, in
which case only its first token waits).
TTFT = queue + load + prefill.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import simpy

from agentsim.cache.radix import Node, RadixCache
from agentsim.cache.tiers import TieredCache
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.admission import PlainAdmission, TieredAdmission
from agentsim.cluster.serving.batch import Batch, Running
from agentsim.cluster.serving.kv_admission import KvAdmissionRule, VllmOnDemand
from agentsim.cluster.serving.kv_growth import KV_STATS, KvGrowth
from agentsim.cluster.serving.load_rules import CostModelRule, LoadRule
from agentsim.cluster.serving.kv_load import KvLoader
from agentsim.cluster.serving.prefetch import Prefetcher
from agentsim.cluster.serving.queue_causes import QueueCauses
from agentsim.cluster.serving.batch_wait import BatchWait
from agentsim.cluster.serving.recv_interval import RecvInterval
from agentsim.cluster.serving.step_ahead import StepAhead
from agentsim.cluster.serving.step_timer import StepTimer
from agentsim.cluster.serving.toolgap import ToolGapMover


class ServingInstance:
    """One instance; ``on_finish(request)`` is called for every finished or rejected request."""

    def __init__(self, env: simpy.Environment, instance_id: int, cache: RadixCache, cost: StepTimer,
                 block_tokens: int, max_batch_requests: int, prefill_chunk_tokens: int,
                 on_finish: Callable[[LLMRequest], None], check_invariants: bool = False,
                 links=None, load_rule: LoadRule | None = None, overlap_layers: bool = False, peers=None,
                 tiers_config=None, kv_rule: KvAdmissionRule | None = None, preemption: str = "recompute",
                 long_prefill_tokens: int | None = None, mixed_prefill: bool = True,
                 rank_chunk_tokens: int | None = None, schedule_ahead: bool = False,
                 receive_gate: RecvInterval | BatchWait | None = None):
        self.env = env
        self.instance_id = instance_id
        self.cache = cache
        self.cost = cost
        self.block_tokens = block_tokens
        self.max_batch = max_batch_requests
        self.chunk_tokens = prefill_chunk_tokens
        #: Cap on one request's share of an iteration's budget while others prefill too (0: none).
        self.long_prefill_tokens = long_prefill_tokens or 0
        #: Cap on one request's chunk in any iteration (attention DP: a chunk runs on one rank,
        #: within that rank's budget; 0: none).
        self.rank_chunk_tokens = rank_chunk_tokens or 0
        #: False: an iteration with prefill chunks is a prefill-only batch and the decoding
        #: requests wait it out (SGLang's scheduler); True: they take their step in it.
        self.mixed_prefill = mixed_prefill
        #: SGLang's scheduler_recv_interval or TensorRT-LLM's attention-DP balancing
        #: (``recv_interval.receive_gate``): arrivals wait for the next receive point (None:
        #: received at once).
        self.recv = receive_gate
        #: The scheduler forms each step while the one before runs (step_ahead); None: after it.
        #: A receive interval has receive points of its own and takes its place.
        self.ahead = StepAhead() if schedule_ahead and self.recv is None else None
        self.on_finish = on_finish
        #: ``(request) -> None`` called once when a request's first token is out (set by the
        #: router that places requests here, if it tracks first tokens; None: nobody listens).
        self.on_first_token = None
        self.check_invariants = check_invariants
        self.waiting: deque[LLMRequest] = deque()
        #: Background prefills (prefill-ahead): admitted only when no live request waits.
        self.background: deque[LLMRequest] = deque()
        self.background_active = 0        # queued or running background prefills
        self.batch = Batch(self.block_tokens)
        self.busy_s = 0.0
        self.iterations = 0
        self._wakeup = env.event()
        # Memory hierarchy (None/False for an HBM-only instance: the original fast path).
        self.tiered = isinstance(cache, TieredCache)
        self.links = links
        self.load_rule = load_rule if load_rule is not None else CostModelRule()
        self.overlap_layers = overlap_layers
        self.peers = peers or []          # other instances, same NVLink domain first (peer-HBM hits)
        #: Links a peer-HBM load from instance id crosses, all at once (NVLink ingress inside the
        #: domain, both NICs across racks); set with ``peers`` by the hierarchy.
        self.peer_links: dict[int, list] = {}
        #: A shared remote store: the other instances, whose share (tier ``store_tier``) it reads.
        self.store_peers: list = []
        self.store_tier = -1
        self.loading = 0
        self.block_bytes = block_tokens * cost.kv_bytes_per_token
        #: Loads into HBM from lower tiers and peers, and the link time of the cache's copies down.
        self.kv_loader = KvLoader(self)
        if self.tiered and links is not None:
            cache.on_transfer = self.kv_loader.on_cache_transfer
        #: ``before_unpin(request, deepest_node)``: called at a request's end after COMMIT and
        #: before UNPIN (set by the engine for tool-start events).
        self.before_unpin: Callable[[LLMRequest, Node], None] | None = None
        # Prefetch and tool-gap movement; both off by default.
        self.prefetcher: Prefetcher | None = None
        self.tool_gap: ToolGapMover | None = None
        self.tier_stats = {"prefetches": 0, "prefetch_wanted_blocks": 0, "prefetch_staged_blocks": 0,
                           "prefetch_served_tokens": 0, "tool_demoted_blocks": 0, "return_prefetches": 0,
                           "return_prefetched_blocks": 0, "return_prefetch_failed": 0, "return_waits": 0,
                           "shared_store_hit_blocks": 0}
        if self.tiered and tiers_config is not None and links is not None:
            names = [tier.name for tier in cache.tiers]
            # Prefetch stages the hits of tiers below the host tier into it: it needs both.
            staging = cache.staging_tier
            if tiers_config.prefetch.policy != "none" and staging is not None and len(names) > staging + 1:
                self.prefetcher = Prefetcher(self, tiers_config.prefetch)
            demote = tiers_config.on_tool_call == "demote" and len(names) > 1
            return_prefetch = bool(tiers_config.prefetch_before_return) and len(names) > 1
            if demote or return_prefetch:
                self.tool_gap = ToolGapMover(self, demote, return_prefetch, float(tiers_config.return_lead_s))
        self.admission = TieredAdmission(self) if self.tiered else PlainAdmission(self)
        # Engine-style KV admission: the rule, on-demand growth of decoding requests' blocks
        # and preemption (see kv_admission and kv_growth).
        self.kv_rule = kv_rule if kv_rule is not None else VllmOnDemand(None, block_tokens)
        self.kv_rule.attach(self.batch)
        # Swap preemption moves a request's KV into the host tier (the first below HBM, where
        # swap_out_path writes), and needs one.
        self.swap_preemption = preemption == "swap" and self.tiered and cache.staging_tier == 1
        self.kv_stats = dict.fromkeys(KV_STATS, 0)
        self.growth = KvGrowth(self) if self.kv_rule.grows else None
        if self.growth is not None:
            self.batch.decoding.on_add = self.growth.track
        self.queue_causes = QueueCauses()
        #: Disaggregated decode worker: receives the prompt's KV from a prefill worker instead of
        #: computing it (:class:`~agentsim.cluster.serving.disaggregation.KvHandoff`); None otherwise.
        self.kv_handoff = None
        #: Handed-over calls decoding, whose first token comes with their first decode step.
        self.first_token_waiters: list[Running] = []
        self._first_step_end_s = float("nan")   # end of the first step of the last decode stretch
        self.process = env.process(self._loop())

    # --- interface for the router ----------------------------------------------------------
    def submit(self, request: LLMRequest) -> None:
        request.instance = self.instance_id
        request.queue_mark = self.queue_causes.mark(self.env.now)
        if self.ahead is not None and self.batch.running:
            self.ahead.arrive(request, self.env.now)   # the next step is formed already
        else:
            (self.waiting if self.recv is None else self.recv.unreceived).append(request)
        if self.prefetcher is not None:
            self.prefetcher.start(request)
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    @property
    def running(self) -> list[Running]:
        """The batch in admission order."""
        return self.batch.running

    def _first_token(self, req: LLMRequest, at_s: float) -> None:
        """``req``'s first token is out at ``at_s``: record it and tell the listener, once."""
        req.first_token_s = at_s
        if self.on_first_token is not None:
            self.on_first_token(req)

    @property
    def load(self) -> int:
        return (len(self.waiting) + len(self.batch.running) + (len(self.recv) if self.recv is not None else 0)
                + (len(self.ahead) if self.ahead is not None else 0))

    def requeue(self, request: LLMRequest) -> None:
        """Put a preempted request back at the front of the waiting queue (its own queue for a
        background prefill)."""
        request.queue_mark = self.queue_causes.mark(self.env.now)
        (self.background if request.background else self.waiting).appendleft(request)

    def submit_background(self, request: LLMRequest) -> None:
        """Queue a low-priority prefill (``request.background``): it is admitted only while no
        live request waits, and prefills after every live request of an iteration."""
        request.instance = self.instance_id
        request.queue_mark = self.queue_causes.mark(self.env.now)
        self.background.append(request)
        self.background_active += 1
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def cancel_background(self, request: LLMRequest) -> bool:
        """Drop a background prefill that has not been admitted yet; False if it has."""
        try:
            self.background.remove(request)
        except ValueError:
            return False
        self.background_active -= 1
        return True

    def wake(self) -> None:
        """Let the batch loop reconsider the waiting requests (a hold may have ended)."""
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def _admit(self) -> None:
        """Admit waiting requests while they fit (the admission object decides); the cause
        that stopped it is what the rest of the queue now waits for."""
        cause = self.admission.admit()
        if self.background and not self.waiting and len(self.batch.running) < self.max_batch:
            # The admission rules work on ``waiting``: hand them the background queue alone.
            live, self.waiting = self.waiting, self.background
            try:
                self.admission.admit()
            finally:
                self.background, self.waiting = self.waiting, live
        self.queue_causes.set(cause, self.env.now)

    # --- memory hierarchy ---------------------------------------------------------------------
    def kv_arrived(self, state: Running) -> None:
        """The KV ``state`` waited for is in HBM (a load from a lower tier, or a prefill worker's
        hand-off): it prefills what is left, or, with nothing left, has its first token now.
        A disaggregated call may wait for both at once (its decode worker's lower tiers and the
        prefill worker's hand-off): only the last arrival lets it go on."""
        now = self.env.now
        req = state.req
        self.loading -= 1
        state.kv_waits -= 1
        if state.kv_waits > 0:
            return
        state.loaded = True
        handed_off = self.kv_handoff is not None and self.kv_handoff.complete(state)
        if state.prefill_left == 0:
            if handed_off:
                # A disaggregated call: the decode worker's scheduler streams its first token
                # with the outputs of the first step it takes part in (vLLM's NIXL decode
                # computes it there; SGLang and TRT-LLM emit the prefill's token with that step).
                self.first_token_waiters.append(state)
            else:  # overlapped prefill already finished: first token now
                if req.first_token_s != req.first_token_s:
                    self._first_token(req, now)
                self.batch.take_first_token(state)
            self.batch.decoding.pending.append(state)  # joins after the iteration in progress, if any
        if self.check_invariants:
            self.cache.check_invariants()
            self.batch.check_invariants()
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    # --- completion -----------------------------------------------------------------------------
    def _finish(self, state: Running) -> None:
        req = state.req
        now = self.env.now
        admission = getattr(self.cache, "admission", None)
        if admission is not None and not admission.caches_decode:
            # A1 "do not cache decode": only the prompt's blocks stay; the reservation of the
            # output blocks is returned by the commit.
            keys = req.total_keys[state.cached_blocks:req.prompt_blocks]
            admission.rejected_blocks += len(req.total_keys) - req.prompt_blocks
        else:
            keys = req.total_keys[state.cached_blocks:]
        node = self.cache.commit(state.node, keys, state.cached_blocks, state.reserved_blocks, now)
        if req.background:
            # A prefill ahead of the agent's next call: no agent pause begins here.
            self.background_active -= 1
            if req.keep_pin:
                req.held_node = node
            else:
                self.cache.unpin(node)
            req.finish_s = now
            self.on_finish(req)
            return
        if self.before_unpin is not None:
            # Agentic policies (TTL-pin, InferCept, KVFlow) see the paused agent's deepest node
            # while the request still pins it, so a TTL-pin can take over without a gap.
            # A tiered cache's HBM policy works on per-tier entries, not tree nodes.
            self.before_unpin(req, node.entries[0] if self.tiered else node)
        self.cache.unpin(node)
        if self.tool_gap is not None:
            self.tool_gap.on_request_end(req, node)
        req.finish_s = now
        self.on_finish(req)

    def _complete(self) -> None:
        """Finish the requests with no output left, in admission order."""
        decoding = self.batch.decoding
        if decoding.finish_heap and decoding.min_output_left() <= 0:
            for state in self.batch.pop_finished():
                self._finish(state)
        if self.check_invariants:
            self.cache.check_invariants()
            self.batch.check_invariants()

    # --- the batch loop -------------------------------------------------------------------------
    def _loop(self):
        env = self.env
        cost = self.cost
        batch = self.batch
        decoding = batch.decoding
        growth = self.growth
        kv_stats = self.kv_stats
        recv = self.recv
        ahead = self.ahead
        while True:
            if recv is not None and recv.unreceived:
                self.waiting.extend(recv.take(len(batch.running)))
            if ahead is not None and ahead.pending:
                self.waiting.extend(ahead.release(idle=not batch.running))
            self._admit()
            decoding.flush()
            # Arrivals so far have been considered; only later ones should wake us.
            if self._wakeup.triggered:
                self._wakeup = env.event()
            if not batch.running:
                self.kv_rule.on_idle()
                yield self._wakeup
                continue
            if self.loading:
                prefilling = batch.prefilling if self.overlap_layers else [s for s in batch.prefilling if s.loaded]
                if not prefilling and not decoding.count:
                    if ahead is not None and ahead.pending:   # no step to form: as if idle
                        self.waiting.extend(ahead.release(idle=True))
                        continue
                    yield self._wakeup  # everything waits on loads
                    continue
            else:
                prefilling = batch.prefilling
            if self.background_active and len(prefilling) > 1:
                # Live prefills take the iteration's token budget first.
                prefilling = ([s for s in prefilling if not s.req.background]
                              + [s for s in prefilling if s.req.background])
            covered = 0
            if growth is not None and decoding.count:
                # The decoding requests need blocks for the coming step(s); preempting changes
                # the batch, so the loop starts over (admission, then this again).
                preempted = kv_stats["preemptions"]
                covered = growth.ensure(1 if prefilling else decoding.min_output_left())
                if kv_stats["preemptions"] != preempted:
                    continue
            if prefilling:
                yield from self._prefill_iteration(prefilling, cost)
                if recv is not None:
                    recv.on_prefill_iteration()
                first_step_end_s = env.now
            else:
                yield from self._decode_stretch(cost, covered)
                first_step_end_s = self._first_step_end_s
            if self.first_token_waiters:
                self._emit_first_tokens(first_step_end_s)
            decoding.flush()
            self._complete()

    def _emit_first_tokens(self, first_step_end_s: float) -> None:
        """Handed-over calls whose first decode step ended in the iteration just run (it ended
        at ``first_step_end_s``) have their first token then."""
        clock = self.batch.decoding.clock
        waiting = []
        for state in self.first_token_waiters:
            if state.gone:                     # preempted before its first step: it re-prefills
                continue
            # Its first step is the one after the clock it joined at (finish - output left).
            if state.decoding and clock > state.finish_clock - state.output_left:
                req = state.req
                req.decode_first_step_s = first_step_end_s - (req.prefill_done_s + req.decode_queue_s + req.kv_transfer_s)
                self._first_token(req, first_step_end_s)
            else:
                waiting.append(state)
        self.first_token_waiters = waiting

    def _prefill_iteration(self, prefilling: list[Running], cost: StepTimer):
        env = self.env
        decoding = self.batch.decoding
        # The decoding requests step with the chunks only in a mixed iteration.
        n_decoding = decoding.count if self.mixed_prefill else 0
        budget = self.chunk_tokens - n_decoding
        if not budget > 1:  # max(1, budget)
            budget = 1
        chunks = []        # (state, new tokens)
        work = []          # (new tokens, context before the chunk): what the step timer needs
        start = env.now
        # With several prompts prefilling, each takes at most ``cap`` tokens, so the budget left
        # reaches the ones behind a long cold prefill (vLLM's long_prefill_token_threshold).
        cap = self.long_prefill_tokens if len(prefilling) > 1 else 0
        for state in prefilling:
            if budget <= 0:
                break
            n = budget if budget < state.prefill_left else state.prefill_left  # min(prefill_left, budget)
            if cap and n > cap:
                n = cap
            if self.rank_chunk_tokens and n > self.rank_chunk_tokens:
                n = self.rank_chunk_tokens
            budget -= n
            chunks.append((state, n))
            work.append((n, state.context_tokens))
            if state.chunk_wait is not None:
                self._first_chunk(state, start)
        duration = cost.iteration_s(work, n_decoding, decoding.context_tokens())
        if self.ahead is not None:
            self.ahead.last_step_start_s = start
        yield env.timeout(duration)
        self.busy_s += duration
        self.iterations += 1
        now = env.now
        prefill_done = False
        if n_decoding:
            decoding.clock += 1  # the decoding requests' step; those finishing prefill now join after it
            self.kv_rule.on_decode_steps(1)
        for state, n in chunks:
            state.prefill_left -= n
            if state.resumed:
                # A re-prefill after a preemption: only its prompt part counts as prefilled.
                k = n if n < state.prompt_left else state.prompt_left
                state.prompt_left -= k
                state.req.prefilled_tokens += k
            else:
                state.req.prefilled_tokens += n
            state.context_tokens += n
            if state.prefill_left == 0:
                prefill_done = True
                state.prefill_done_s = now
                if state.loaded:
                    if state.req.first_token_s != state.req.first_token_s:   # nan: none yet
                        self._first_token(state.req, now)
                    self.batch.take_first_token(state)
                    decoding.add(state)
        if prefill_done:
            self.batch.drop_finished_prefills()

    def _first_chunk(self, state: Running, start_s: float) -> None:
        """``state`` gets its first prefill chunk at ``start_s``: record how long it waited for
        the chunk budget since it was admitted (or since its load ended, if it waited for it)."""
        req = state.req
        ready = state.chunk_wait
        done = req.load_done_s
        if not self.overlap_layers and done == done and done > ready:
            ready = done
        waited = start_s - ready
        req.queue_chunk_s = waited if req.queue_chunk_s != req.queue_chunk_s else req.queue_chunk_s + waited
        state.chunk_wait = None

    def _decode_stretch(self, cost: StepTimer, covered_steps: int = 0):
        """Decode-only steps up to the next completion (or, with on-demand KV blocks, up to
        ``covered_steps``, where the blocks end), cut short at a step boundary by an arrival."""
        env = self.env
        # Only decoding requests are left (no prefill is possible now), loads aside.
        decoding = self.batch.decoding
        n = decoding.count
        context = decoding.context_tokens()
        steps = decoding.min_output_left()
        if covered_steps and covered_steps < steps:
            steps = covered_steps
        recv = self.recv
        if recv is not None and recv.unreceived:
            # Requests are waiting to be received: the stretch ends at the next receive point.
            steps = min(steps, recv.steps_until_receive(0, n))
        ahead = self.ahead
        if ahead is not None and ahead.pending:
            steps = 1   # arrivals of the last step join once the step formed without them ran
        start = env.now
        if self.first_token_waiters:
            self._first_step_end_s = start + cost.decode_stretch_s(n, context, 1)
        full_s = cost.decode_stretch_s(n, context, steps)
        timeout = env.timeout(full_s)
        if len(self.batch.running) < self.max_batch or self.loading:
            result = yield timeout | self._wakeup
            if timeout not in result:
                # A request arrived: finish the step in progress, then let it join.
                done = cost.decode_steps_within(n, context, env.now - start)
                # It is received after the step in progress (after the one formed during it,
                # when the scheduler runs a step ahead), or at the next receive point.
                until = recv.steps_until_receive(done, n) if recv is not None else done + (1 if ahead is None else 2)
                if until < steps:
                    steps = until
                end = start + cost.decode_stretch_s(n, context, steps)
                if end > env.now:
                    yield env.timeout(end - env.now)
        else:
            yield timeout
        self.busy_s += env.now - start
        self.iterations += steps
        if ahead is not None:
            ahead.last_step_start_s = start + cost.decode_stretch_s(n, context, steps - 1)
        decoding.clock += steps
        self.kv_rule.on_decode_steps(steps)
        if recv is not None:
            recv.on_decode_steps(steps)
