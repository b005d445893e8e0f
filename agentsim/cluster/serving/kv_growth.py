"""On-demand KV blocks for decoding requests, and preemption when none can be had.

Decoding requests advance on one shared clock (:class:`~agentsim.cluster.serving.batch.DecodingSet`),
so their block needs are tracked the same way: each has a ``cover_clock``, the clock up to
which the blocks it holds suffice, and a heap gives the earliest. Before the batch takes
``steps`` steps, :meth:`KvGrowth.ensure` grows every request whose cover ends sooner, to cover
``GROWTH_HORIZON_BLOCKS`` blocks' worth of steps ahead (one event per few blocks, not per
token); if that cannot be had it asks for the one block the next step needs, and only if even
that fails does it preempt (the rule picks the victim) and retry. It returns how many steps the blocks now cover.

A preempted request leaves the batch at once: the full blocks it computed are committed to the
cache unpinned (so its re-admission may hit them, as vLLM keeps freed blocks hashed), the rest
of its reservation is released, and it goes back to the front of the waiting queue to prefill
its prompt and the output so far again. With ``preemption: swap`` and a DRAM tier its private
blocks are swapped out to DRAM after the commit, so re-admission can load them back.
"""

from __future__ import annotations

import heapq

from agentsim.cluster.serving.batch import Running

#: An instance's KV admission counters (``ServingInstance.kv_stats``): preemptions of every
#: kind, those recomputing and those swapping to DRAM, the blocks swapped out and loaded back
#: in on re-admission, and the preemptions that are SGLang retractions.
KV_STATS = ("preemptions", "recompute_preemptions", "swap_preemptions", "swapped_out_blocks", "swapped_in_blocks",
            "retractions")

#: Blocks a growth step adds at most per request (ahead of need): bounds both the events per
#: decoded token and the KV held ahead of need (vLLM allocates exactly per step).
GROWTH_HORIZON_BLOCKS = 4


class KvGrowth:
    """Block growth and preemption of one instance. Uses of its instance: ``env``, ``cache``,
    ``batch``, ``block_tokens``, ``waiting``, ``kv_rule``, ``kv_stats``, ``swap_preemption``,
    ``check_invariants`` and ``requeue()``."""

    def __init__(self, host):
        self.host = host
        self.heap: list[tuple[int, int, Running]] = []
        self.horizon_steps = GROWTH_HORIZON_BLOCKS * host.block_tokens

    def track(self, state: Running) -> None:
        """``state`` has started decoding: watch when its blocks run out."""
        cover = state.held_blocks() * self.host.block_tokens - state.ctx_base
        state.cover_clock = cover
        if cover < state.finish_clock:
            heapq.heappush(self.heap, (cover, state.seq, state))

    def ensure(self, steps: int) -> int:
        """Have the decoding requests' blocks cover the next ``steps`` steps if they can (at
        least the next one, preempting if need be); returns the steps covered (0: none decode)."""
        host = self.host
        batch = host.batch
        decoding = batch.decoding
        heap = self.heap
        clock = decoding.clock
        bt = host.block_tokens
        horizon = steps if steps < self.horizon_steps else self.horizon_steps
        target = clock + horizon
        # A request that must grow grows by the whole horizon, not just to ``target``: a short
        # stretch (a mixed iteration, a decode worker taking a hand-off every few steps) would
        # otherwise grow every request one block per block boundary, the dominant cost of a
        # wide, long-output batch. A reservation that fails falls back to the next step's need.
        ahead = clock + self.horizon_steps
        reserve = host.cache.reserve
        now = host.env.now
        heappop = heapq.heappop
        # A wide batch grows a few hundred requests by a block every step: the loop body is
        # :meth:`track` and ``held_blocks`` inlined, and a grown request's entry is replaced in
        # one sift (entries order by (cover, seq), unique, so the pops come in the same order).
        while heap:
            cover, _, state = heap[0]
            if state.gone or not state.decoding or cover != state.cover_clock:
                heappop(heap)
                continue
            if cover >= target:
                break
            finish = state.finish_clock
            want = ahead if ahead < finish else finish
            held = state.cached_blocks + state.reserved_blocks
            base = state.ctx_base
            grow = -(-(want + base) // bt) - held
            if not reserve(grow, now):
                if cover > clock:
                    break    # the next step is covered; the stretch ends where the blocks do
                grow = -(-(clock + 1 + base) // bt) - held
                if not reserve(grow, now):
                    self.preempt_for(state)
                    clock = decoding.clock
                    continue
            state.reserved_blocks += grow
            batch.held_blocks += grow
            cover = (held + grow) * bt - base
            state.cover_clock = cover
            if cover < finish:
                heapq.heapreplace(heap, (cover, state.seq, state))
            else:
                heappop(heap)
        if not decoding.count:
            return 0
        while heap and (heap[0][2].gone or not heap[0][2].decoding or heap[0][0] != heap[0][2].cover_clock):
            heappop(heap)
        if heap and heap[0][0] - clock < steps:
            return heap[0][0] - clock
        return steps

    def preempt_for(self, needy: Running) -> None:
        """Free blocks for ``needy`` by preempting the rule's victim (maybe ``needy`` itself)."""
        host = self.host
        victim = host.kv_rule.pick_victim(host.batch, host.batch.decoding.clock)
        if victim is None:
            victim = needy
        self.preempt(victim)
        host.kv_rule.on_preempted(host.batch, host.batch.decoding.clock)

    def preempt(self, state: Running) -> None:
        """Take ``state`` out of the batch, keep its computed full blocks cached, re-queue it."""
        host = self.host
        cache = host.cache
        now = host.env.now
        bt = host.block_tokens
        req = state.req
        host.batch.remove(state)
        # Tokens whose KV it computed (materialised by remove), and the sequence it must have
        # computed before producing its next token: the same for a decoding request (prompt and
        # output so far), but a request preempted mid-prefill still owes the rest of its prompt
        # (or of its re-prefill), ``prefill_left``; resuming from ``computed`` alone would drop it.
        computed = state.context_tokens
        sequence = computed + state.prefill_left
        admission = getattr(cache, "admission", None)
        keys = req.prompt_keys if admission is not None and not admission.caches_decode else req.total_keys
        full = computed // bt
        if full > len(keys):
            full = len(keys)
        commit_keys = keys[state.cached_blocks:full] if full > state.cached_blocks else []
        node = cache.commit(state.node, commit_keys, state.cached_blocks, state.reserved_blocks, now)
        cache.unpin(node)
        stats = host.kv_stats
        stats["preemptions"] += 1
        if host.kv_rule.retracts:
            stats["retractions"] += 1
        req.preemptions += 1
        if host.swap_preemption:
            swapped = cache.swap_out_path(node, now, reason="preempt_swap")
            stats["swap_preemptions"] += 1
            stats["swapped_out_blocks"] += swapped
            req.swap_preemptions += 1
        else:
            stats["recompute_preemptions"] += 1
        req.resume_tokens = sequence
        req.resume_computed_tokens = computed
        req.resume_output_left = state.output_left
        host.requeue(req)
        if host.check_invariants:
            cache.check_invariants()
