"""The batch state of a serving instance: its running requests, split into prefilling (or
loading) and decoding ones, with the decoding ones advanced lazily by one shared clock."""

from __future__ import annotations

import heapq

from agentsim.cache.radix import Node
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.output_left import ClippedOutputLeft
from agentsim.errors import InvariantViolation


#: Completions of one iteration up to which :meth:`Batch.pop_finished` removes them one by one.
_REMOVE_ONE_BY_ONE = 8


class Running:
    """A request in the batch.

    While it prefills (or waits for its load), ``prefill_left``, ``context_tokens`` and
    ``output_left`` are kept up to date. Once it decodes, every decoding request advances by
    the same number of steps per iteration, so the instance advances one clock instead of
    touching each of them (see :class:`DecodingSet`): its ``context_tokens`` and
    ``output_left`` are frozen at entry, and ``ctx_base`` and ``finish_clock`` say where it
    stands relative to that clock.
    """

    __slots__ = ("req", "node", "cached_blocks", "reserved_blocks", "prefill_left", "context_tokens", "output_left",
                 "loaded", "prefill_done_s", "seq", "ctx_base", "finish_clock", "decoding", "gone", "cover_clock",
                 "resumed", "prompt_left", "chunk_wait", "kv_waits", "completion_blocks", "clip_share", "clip_near")

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
        self.decoding = False     # in the decoding set (counters relative to its clock)
        self.gone = False         # left the batch early (preempted)
        self.cover_clock = 0      # decoding clock up to which its KV blocks suffice (growing rules)
        self.resumed = False      # re-admitted after a preemption
        self.prompt_left = 0      # resumed: prompt tokens of its re-prefill still to count as prefilled
        self.chunk_wait = None    # admission time until its first prefill chunk is scheduled
        self.kv_waits = 0         # KV arrivals still awaited (a load, a disaggregated hand-off)
        self.completion_blocks = 0  # blocks of prompt + all output (set when it joins a batch)
        self.clip_share = 0       # its part of a ClippedOutputLeft while not decoding
        self.clip_near = False    # decoding with fewer output tokens left than that clip

    def output_left_at(self, clock: int) -> int:
        """Output tokens still to produce, at decoding clock ``clock``."""
        return self.finish_clock - clock if self.decoding else self.output_left

    def held_blocks(self) -> int:
        """KV blocks it holds in HBM: its cached prefix plus its reservation."""
        return self.cached_blocks + self.reserved_blocks


class DecodingSet:
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

    __slots__ = ("clock", "count", "ctx_base_sum", "finish_heap", "pending", "on_add", "output_left")

    def __init__(self):
        self.clock = 0
        self.count = 0
        self.ctx_base_sum = 0
        self.finish_heap: list[tuple[int, int, Running]] = []
        #: Requests whose load arrived during an iteration: they join after that iteration's
        #: step (see :meth:`flush`), not taking a step they were not part of.
        self.pending: list[Running] = []
        #: Called with each request that starts decoding (KV growth watches its blocks).
        self.on_add = None
        #: The batch's clipped output-left sum, if a KV admission rule asked for it.
        self.output_left = None

    def flush(self) -> None:
        """Add the requests that became ready during the last iteration."""
        if self.pending:
            for state in self.pending:
                self.add(state)
            self.pending = []

    def add(self, state: Running) -> None:
        """``state`` starts decoding now with its current context and output left."""
        state.ctx_base = state.context_tokens - self.clock
        state.finish_clock = state.output_left + self.clock
        state.decoding = True
        self.count += 1
        self.ctx_base_sum += state.ctx_base
        heapq.heappush(self.finish_heap, (state.finish_clock, state.seq, state))
        if self.output_left is not None:
            self.output_left.start_decoding(state, self.clock)
        if self.on_add is not None:
            self.on_add(state)

    def remove(self, state: Running) -> None:
        """Take ``state`` out early (preemption); its counters are materialised. Its heap entry
        is dropped lazily (``gone`` is set by the caller)."""
        self.count -= 1
        self.ctx_base_sum -= state.ctx_base
        if self.output_left is not None:
            self.output_left.stop_decoding(state)
        state.context_tokens = state.ctx_base + self.clock
        state.output_left = state.finish_clock - self.clock
        state.decoding = False
        heap = self.finish_heap
        while heap and heap[0][2].gone:
            heapq.heappop(heap)

    def context_tokens(self) -> int:
        return self.ctx_base_sum + self.count * self.clock

    def min_output_left(self) -> int:
        return self.finish_heap[0][0] - self.clock

    def pop_finished(self) -> list[Running]:
        """Remove and return the requests with no output left, in admission order."""
        heap = self.finish_heap
        done = []
        while heap and heap[0][0] <= self.clock:
            state = heapq.heappop(heap)[2]
            if state.gone:
                continue
            state.decoding = False
            self.count -= 1
            self.ctx_base_sum -= state.ctx_base
            if self.output_left is not None:
                self.output_left.stop_decoding(state)
            # Materialise its counters (as a per-request scan would have left them).
            state.context_tokens = state.ctx_base + self.clock
            state.output_left = state.finish_clock - self.clock
            done.append(state)
        if len(done) > 1:
            done.sort(key=lambda st: st.seq)
        while heap and heap[0][2].gone:
            heapq.heappop(heap)
        return done


class Batch:
    """The running requests of one instance in admission order; each is also either prefilling
    or loading (``prefilling``, in admission order) or decoding (``decoding``).

    It also keeps two block totals over the running requests, so a KV admission rule that
    weighs the whole batch every pass need not scan it: ``held_blocks``, the blocks they hold
    (cached prefix plus reservation; whoever grows a reservation adds to it), and
    ``completion_blocks``, the blocks their prompts and whole outputs take (``block_tokens``
    per block)."""

    __slots__ = ("running", "prefilling", "decoding", "admitted", "block_tokens", "held_blocks", "completion_blocks")

    def __init__(self, block_tokens: int = 16):
        self.running: list[Running] = []
        self.prefilling: list[Running] = []
        self.decoding = DecodingSet()
        self.admitted = 0   # requests admitted so far (the next one's ``seq``)
        self.block_tokens = block_tokens
        self.held_blocks = 0
        self.completion_blocks = 0

    def __len__(self) -> int:
        return len(self.running)

    def join(self, state: Running) -> None:
        """Add an admitted request to the batch."""
        state.seq = self.admitted
        self.admitted += 1
        self.running.append(state)
        req = state.req
        state.completion_blocks = -(-(req.prompt_tokens + req.output_tokens) // self.block_tokens)
        self.completion_blocks += state.completion_blocks
        self.held_blocks += state.cached_blocks + state.reserved_blocks
        if self.decoding.output_left is not None:
            self.decoding.output_left.enter(state)
        if state.prefill_left > 0:
            self.prefilling.append(state)
        elif state.loaded:
            self.decoding.add(state)

    def track_output_left(self, clip_tokens: int) -> None:
        """Keep ``decoding.output_left``, the running requests' output left clipped at
        ``clip_tokens`` (before any request joins)."""
        self.decoding.output_left = ClippedOutputLeft(clip_tokens)

    def take_first_token(self, state: Running) -> None:
        """``state``, not decoding yet, has its first output token (its prefill's)."""
        state.output_left -= 1
        state.context_tokens += 1
        if self.decoding.output_left is not None:
            self.decoding.output_left.reshare(state)

    def drop_finished_prefills(self) -> None:
        """Forget the prefilling requests whose prefill is done (after an iteration)."""
        self.prefilling = [s for s in self.prefilling if s.prefill_left > 0]

    def remove(self, state: Running) -> None:
        """Take ``state`` out of the batch before it finished (preemption)."""
        state.gone = True
        self.running.remove(state)
        self.completion_blocks -= state.completion_blocks
        self.held_blocks -= state.cached_blocks + state.reserved_blocks
        if state.decoding:
            self.decoding.remove(state)
        else:
            if self.decoding.output_left is not None:
                self.decoding.output_left.leave_outside(state)
            if state.prefill_left > 0:
                self.prefilling.remove(state)

    def pop_finished(self) -> list[Running]:
        """Remove and return the decoding requests with no output left, in admission order."""
        finished = self.decoding.pop_finished()
        for state in finished:
            self.completion_blocks -= state.completion_blocks
            self.held_blocks -= state.cached_blocks + state.reserved_blocks
        if len(finished) <= _REMOVE_ONE_BY_ONE:
            # A few completions (lengths that differ spread them out): list.remove scans in C,
            # where a rebuild ran Python code per running request (a 2,048-client row: 5% of
            # its emulation).
            running = self.running
            for state in finished:
                running.remove(state)
        else:
            # Many at once (a lock-step batch): one rebuild.
            gone = {state.seq for state in finished}
            self.running = [state for state in self.running if state.seq not in gone]
        return finished

    def check_invariants(self) -> None:
        """The block totals equal a scan of the running requests."""
        held = sum(state.cached_blocks + state.reserved_blocks for state in self.running)
        completion = sum(state.completion_blocks for state in self.running)
        if held != self.held_blocks or completion != self.completion_blocks:
            raise InvariantViolation(f"batch block totals held {self.held_blocks} / completion "
                                     f"{self.completion_blocks}, a scan gives {held} / {completion}")
        tracker = self.decoding.output_left
        if tracker is not None:
            clock = self.decoding.clock
            scan = sum(min(state.output_left_at(clock), tracker.clip) for state in self.running)
            if tracker.total(clock) != scan:
                raise InvariantViolation(f"clipped output left {tracker.total(clock)}, a scan gives {scan}")
