"""Engine-style KV admission rules: how many KV blocks a request holds, when it may join the
batch, and which running request gives its blocks up when decode runs out of them.

Chosen by ``serving.engine`` (vllm | sglang | trtllm), overridable by ``serving.kv_admission``:

* ``vllm`` (vLLM v1 ``KVCacheManager.allocate_slots`` and ``Scheduler.schedule``): blocks for
  the prompt at admission, output blocks as decode grows. A request is admitted when its prompt
  blocks can be had (evicting unpinned cached blocks). When a running request needs a block and
  none can be had, the most recently admitted running request is preempted (``running.pop()``
  under FCFS), until the block is found or the request itself was preempted. No request is
  admitted in a step that preempted.
* ``sglang`` (SGLang ``PrefillAdder`` and ``Scheduler.update_running_batch``): the same
  on-demand allocation, but a request is admitted only while the free plus evictable tokens
  exceed its new prompt tokens plus its clipped output (``min(max_new, 4096)``) plus
  ``new_token_ratio`` times the clipped remaining output of every running request. The ratio
  starts at ``init_new_token_ratio``, decays by ``new_token_ratio_decay`` per decode step down
  to ``min_new_token_ratio``, and is re-estimated on a retraction (decode out of blocks) as
  ``min(1, (decoded + 20 * running) / max_new of the running requests)``; it returns to the
  initial value when the instance goes idle. A retraction takes the decoding request with the
  fewest output tokens so far (ties: the longest prompt), as ``retract_decode`` sorts.
* ``trtllm`` (TensorRT-LLM ``CapacityScheduler``, its default policy ``GUARANTEED_NO_EVICT``):
  a request is admitted only if the free plus evictable blocks cover its blocks to completion
  after those every running request still needs to complete; blocks are then allocated on
  demand and never run out (unless other pins appear, when the vllm preemption is used).
  TensorRT-LLM's other policy, ``MAX_UTILIZATION``, admits like vllm and pauses the newest
  request, which the ``vllm`` rule already models.
* ``reserve_full``: every prompt and output block reserved at admission, never preempted (the
  behaviour before engine-style admission; kept to reproduce older results).

The simulator knows each call's output length, which plays the engines' ``max_new_tokens``
(benchmarks run with ``ignore_eos``, where the two agree).
"""

from __future__ import annotations

from agentsim.registry import Registry

KV_ADMISSION: Registry = Registry("KV admission rule")

#: SGLang's CLIP_MAX_NEW_TOKENS: output tokens counted at most per request in the reservation.
SGLANG_CLIP_MAX_NEW_TOKENS = 4096
#: SGLang's RETRACT_DECODE_STEPS: steps of headroom assumed in the ratio re-estimate.
SGLANG_RETRACT_DECODE_STEPS = 20


def preemptible(state) -> bool:
    """Prefilling or decoding, with no load in flight (a load's blocks are not given back)."""
    return state.loaded and (state.decoding or state.prefill_left > 0)


class KvAdmissionRule:
    """One engine's KV admission. ``serving``: the scenario's ``ServingConfig`` (or None)."""

    #: False: every output block is reserved at admission and decode never needs a block.
    grows = True
    #: True: the engine calls its preemptions retractions (counted as such as well).
    retracts = False

    def __init__(self, serving=None, block_tokens: int = 16):
        self.serving = serving
        self.block_tokens = block_tokens

    def blocks_at_admission(self, sequence_tokens: int, total_blocks: int) -> int:
        """Blocks a request holds once admitted (cached ones included): its prompt's."""
        blocks = -(-sequence_tokens // self.block_tokens)
        return blocks if blocks < total_blocks else total_blocks

    def attach(self, batch) -> None:
        """The rule serves ``batch`` (empty yet): ask it for any running totals it reads."""

    def begin_pass(self, host) -> bool:
        """An admission pass starts; False: admit nothing now."""
        return True

    def admits(self, new_blocks: int, extend_tokens: int, output_left: int, blocks_to_completion: int,
               newly_pinned_blocks: int = 0) -> bool:
        """Whether a request may join now: ``new_blocks`` to reserve now, ``extend_tokens`` to
        prefill, ``output_left`` output tokens to produce, ``blocks_to_completion`` blocks it
        will still need after these, ``newly_pinned_blocks`` cached blocks its match pinned
        that were evictable when the pass began (no longer free once it runs). Admitting it is
        assumed to follow when True."""
        return True

    def on_decode_steps(self, steps: int) -> None:
        """``steps`` decode steps were taken."""

    def on_idle(self) -> None:
        """The instance has nothing running."""

    def pick_victim(self, batch, decoding_clock: int):
        """The running request to preempt when a block cannot be had (None: none can be)."""
        for state in reversed(batch.running):
            if preemptible(state):
                return state
        return None

    def on_preempted(self, batch, decoding_clock: int) -> None:
        """Requests were preempted in this step."""


@KV_ADMISSION.register("reserve_full")
class ReserveFull(KvAdmissionRule):
    """Every prompt and output block reserved at admission; never preempts."""

    grows = False

    def blocks_at_admission(self, sequence_tokens, total_blocks):
        return total_blocks


@KV_ADMISSION.register("vllm")
class VllmOnDemand(KvAdmissionRule):
    """vLLM v1: prompt blocks at admission, output blocks on demand; preempts the newest request."""

    def __init__(self, serving=None, block_tokens=16):
        super().__init__(serving, block_tokens)
        self._preempted = False

    def begin_pass(self, host):
        # vLLM v1 schedules no waiting request in a step that preempted a running one (a batch
        # left empty by preemptions admits at once: the next step would).
        preempted, self._preempted = self._preempted, False
        return not (preempted and host.batch.running)

    def on_preempted(self, batch, decoding_clock):
        self._preempted = True


@KV_ADMISSION.register("sglang")
class SglangNewTokenRatio(KvAdmissionRule):
    """SGLang: admits while free tokens cover new prompts plus a decaying share of running outputs."""

    retracts = True

    def __init__(self, serving=None, block_tokens=16):
        super().__init__(serving, block_tokens)
        self.init_ratio = serving.init_new_token_ratio if serving is not None else 0.7
        self.min_ratio = serving.min_new_token_ratio if serving is not None else 0.1
        self.decay = serving.new_token_ratio_decay if serving is not None else 0.001
        self.ratio = self.init_ratio
        self._budget_tokens = 0.0

    def attach(self, batch):
        batch.track_output_left(SGLANG_CLIP_MAX_NEW_TOKENS)

    def begin_pass(self, host):
        # The running requests' output left, each clipped, kept by the batch: this pass runs
        # every iteration, and a scan of thousands of requests per pass was the largest cost
        # of a wide deployment's emulation.
        cache = host.cache
        decoding = host.batch.decoding
        reserved = decoding.output_left.total(decoding.clock) * self.ratio
        self._budget_tokens = (cache.capacity_blocks - cache.pinned_blocks()) * self.block_tokens - reserved
        return True

    def admits(self, new_blocks, extend_tokens, output_left, blocks_to_completion, newly_pinned_blocks=0):
        # SGLang locks the request's prefix before the check, which takes it out of the
        # evictable tokens the budget is made of.
        self._budget_tokens -= newly_pinned_blocks * self.block_tokens
        clip = SGLANG_CLIP_MAX_NEW_TOKENS
        total = extend_tokens + (output_left if output_left < clip else clip)
        if total >= self._budget_tokens:
            self._budget_tokens += newly_pinned_blocks * self.block_tokens   # unlocked again
            return False
        self._budget_tokens -= total
        return True

    def on_decode_steps(self, steps):
        ratio = self.ratio - self.decay * steps
        self.ratio = ratio if ratio > self.min_ratio else self.min_ratio

    def on_idle(self):
        self.ratio = self.init_ratio

    def pick_victim(self, batch, decoding_clock):
        best, best_key = None, None
        for state in batch.running:
            if not state.decoding:
                continue    # SGLang retracts from the decode batch only
            req = state.req
            key = (req.output_tokens - state.output_left_at(decoding_clock), -req.prompt_tokens, -state.seq)
            if best_key is None or key < best_key:
                best, best_key = state, key
        return best if best is not None else super().pick_victim(batch, decoding_clock)

    def on_preempted(self, batch, decoding_clock):
        decoded = max_new = n = 0
        for state in batch.running:
            if state.prefill_left > 0:
                continue
            out = state.req.output_tokens
            decoded += out - state.output_left_at(decoding_clock)
            max_new += out
            n += 1
        if max_new > 0:
            estimate = (decoded + SGLANG_RETRACT_DECODE_STEPS * n) / max_new
            self.ratio = estimate if estimate < 1.0 else 1.0
        else:
            self.ratio = self.init_ratio


@KV_ADMISSION.register("trtllm")
class TrtllmGuaranteedNoEvict(KvAdmissionRule):
    """TensorRT-LLM GUARANTEED_NO_EVICT: admits only if every running request can still complete."""

    def __init__(self, serving=None, block_tokens=16):
        super().__init__(serving, block_tokens)
        self._free_blocks = 0

    def begin_pass(self, host):
        # The blocks the running requests still owe to completion: the batch keeps both totals
        # (this pass runs every iteration; a scan of thousands of requests per pass was the
        # largest cost of a wide deployment's emulation). A request never holds more than its
        # completion needs, so the difference is the sum of what each still owes.
        batch = host.batch
        owed = batch.completion_blocks - batch.held_blocks
        self._free_blocks = host.cache.capacity_blocks - host.cache.pinned_blocks() - owed
        return True

    def admits(self, new_blocks, extend_tokens, output_left, blocks_to_completion, newly_pinned_blocks=0):
        # Its cached prefix, evictable when the pass began, is held from now on too: without
        # it the guarantee breaks and decode runs out of blocks.
        need = new_blocks + blocks_to_completion + newly_pinned_blocks
        if need > self._free_blocks:
            return False
        self._free_blocks -= need
        return True


def make_kv_admission(serving, block_tokens: int) -> KvAdmissionRule:
    """The rule ``serving`` selects (``kv_admission`` or else the engine's)."""
    name = serving.kv_admission_rule()
    return KV_ADMISSION.get(name)(serving, block_tokens)
