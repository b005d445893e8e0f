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
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import simpy

from agentsim.cache.radix import Node, RadixCache
from agentsim.cluster.costmodel import RooflineCostModel
from agentsim.cluster.request import LLMRequest


class _Running:
    __slots__ = ("req", "node", "cached_blocks", "reserved_blocks", "prefill_left", "context_tokens", "output_left")

    def __init__(self, req: LLMRequest, node: Node, cached_blocks: int, reserved_blocks: int, hit_tokens: int):
        self.req = req
        self.node = node
        self.cached_blocks = cached_blocks
        self.reserved_blocks = reserved_blocks
        self.prefill_left = req.prompt_tokens - hit_tokens
        self.context_tokens = hit_tokens
        self.output_left = req.output_tokens


class ServingInstance:
    """One instance; ``on_finish(request)`` is called for every finished or rejected request."""

    def __init__(self, env: simpy.Environment, instance_id: int, cache: RadixCache, cost: RooflineCostModel,
                 block_tokens: int, max_batch_requests: int, prefill_chunk_tokens: int,
                 on_finish: Callable[[LLMRequest], None], check_invariants: bool = False):
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
        self.running: list[_Running] = []
        self.busy_s = 0.0
        self.iterations = 0
        self._wakeup = env.event()
        self.process = env.process(self._loop())

    # --- interface for the router ----------------------------------------------------------
    def submit(self, request: LLMRequest) -> None:
        request.instance = self.instance_id
        self.waiting.append(request)
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    # --- scheduling ---------------------------------------------------------------------------
    def _admit(self) -> None:
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
            match = cache.match(req.prompt_keys, now)
            cached = match.hit_blocks
            cache.pin(match.node)
            need = total_blocks - cached
            if not cache.reserve(need, now):
                cache.unpin(match.node)
                break
            self.waiting.popleft()
            # At least one prompt token is always computed (it produces the first output token).
            hit_tokens = min(cached * block_tokens, req.prompt_tokens - 1)
            req.hit_tokens = hit_tokens
            req.admitted_s = now
            self.running.append(_Running(req, match.node, cached, need, hit_tokens))

    def _finish(self, state: _Running) -> None:
        req = state.req
        now = self.env.now
        keys = req.total_keys[state.cached_blocks:]
        node = self.cache.commit(state.node, keys, state.cached_blocks, state.reserved_blocks, now)
        self.cache.unpin(node)
        req.finish_s = now
        self.on_finish(req)

    def _complete(self) -> None:
        still = []
        for state in self.running:
            if state.prefill_left == 0 and state.output_left <= 0:
                self._finish(state)
            else:
                still.append(state)
        self.running = still
        if self.check_invariants:
            self.cache.check_invariants()

    def _loop(self):
        env = self.env
        cost = self.cost
        while True:
            self._admit()
            # Arrivals so far have been considered; only later ones should wake us.
            if self._wakeup.triggered:
                self._wakeup = env.event()
            if not self.running:
                yield self._wakeup
                continue
            prefilling = [s for s in self.running if s.prefill_left > 0]
            if prefilling:
                yield from self._prefill_iteration(prefilling, cost)
            else:
                yield from self._decode_stretch(cost)
            self._complete()

    def _prefill_iteration(self, prefilling: list[_Running], cost: RooflineCostModel):
        env = self.env
        decoding = [s for s in self.running if s.prefill_left == 0]
        budget = max(1, self.chunk_tokens - len(decoding))
        chunks = []
        flops = 0.0
        for state in prefilling:
            if budget <= 0:
                break
            n = min(state.prefill_left, budget)
            budget -= n
            flops += cost.prefill_flops(n, state.context_tokens)
            chunks.append((state, n))
        decode_context = sum(s.context_tokens for s in decoding)
        duration = cost.iteration_s(flops, len(chunks), len(decoding), decode_context)
        yield env.timeout(duration)
        self.busy_s += duration
        self.iterations += 1
        now = env.now
        for state, n in chunks:
            state.prefill_left -= n
            state.context_tokens += n
            if state.prefill_left == 0:
                state.req.first_token_s = now
                state.output_left -= 1
                state.context_tokens += 1
        for state in decoding:
            state.output_left -= 1
            state.context_tokens += 1

    def _decode_stretch(self, cost: RooflineCostModel):
        env = self.env
        running = self.running
        n = len(running)
        context = sum(s.context_tokens for s in running)
        steps = min(s.output_left for s in running)
        start = env.now
        full_s = cost.decode_stretch_s(n, context, steps)
        timeout = env.timeout(full_s)
        if len(running) < self.max_batch:
            result = yield timeout | self._wakeup
            if timeout not in result:
                # A request arrived: finish the step in progress, then let it join.
                done = cost.decode_steps_within(n, context, env.now - start)
                steps = min(steps, done + 1)
                end = start + cost.decode_stretch_s(n, context, steps)
                if end > env.now:
                    yield env.timeout(end - env.now)
        else:
            yield timeout
        self.busy_s += env.now - start
        self.iterations += steps
        for state in running:
            state.output_left -= steps
            state.context_tokens += steps
