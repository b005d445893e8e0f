"""Prefill-ahead: prefill a session's appended context during its tool gap, so the next call's
TTFT covers only what is left ("ping-pong" overlapped context construction).

An agent harness that streams a tool's output to the serving engine as it arrives lets the
engine compute that part of the next prompt's KV while the tool still runs. Here the tool
output of a gap arrives in parts (the registered mechanism, :data:`PREFILL_AHEAD`, says when and
how much); after each part the instance that served the agent's last call prefills the prompt
so far as a *background* request: admitted only when no live request waits, its prefill chunk
after every live one in an iteration, its KV committed to the cache like any call's (so the
next call matches it), and kept pinned until the call comes if the mechanism says so. At most
one background prefill per agent is queued or running; a part that arrives while one is busy
is covered by the next. The last part arrives when the gap ends and the call is issued, so at
least that part is always left for the call itself.

What it costs is counted: GPU seconds of every background prefill (its prefill time alone,
times the instance's GPUs: the marginal work it adds), the part spent on gaps after which the
call never came (the session ended: the run's duration passed, or its context would be full),
and the pinned KV (block-seconds). Gaps whose next call will compact the history are not
prefilled (the client knows it will rewrite what it would have sent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy
from pydantic import BaseModel, ConfigDict, Field

from agentsim.cluster.request import LLMRequest
from agentsim.registry import Registry

#: Prefill-ahead mechanisms by name (``serving.prefill_ahead``).
PREFILL_AHEAD: Registry = Registry("prefill-ahead mechanism")


class PrefillAheadMechanism:
    """When the parts of a tool's output arrive and whether their KV stays pinned."""

    pin: bool = False
    min_tokens: int = 1   # fewest newly arrived tokens worth a background prefill

    def __init__(self, params=None):
        self.params = params

    def parts(self, gap_s: float, appended_tokens: int) -> list[tuple[float, int]]:
        """(seconds after the gap starts, tokens of the output arrived by then) for each part
        that may be prefilled ahead, in time order; [] prefills nothing."""
        return []


@PREFILL_AHEAD.register("none")
class NoPrefillAhead(PrefillAheadMechanism):
    """No prefill ahead: the next call prefills all of its appended context (the default)."""


@PREFILL_AHEAD.register("streamed")
class StreamedToolOutput(PrefillAheadMechanism):
    """The tool output arrives in equal parts spread over the gap; each is prefilled as it arrives."""

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        chunks: int = Field(4, ge=2, description="parts the tool output arrives in; the k-th at k/chunks of the gap "
                                                 "(the last with the call, so (chunks-1)/chunks can be prefilled ahead)")
        pin: bool = Field(False, description="keep the prefilled KV pinned in HBM until the next call arrives")
        min_tokens: int = Field(256, ge=1, description="prefill only once at least this many new tokens arrived")

    def __init__(self, params: "StreamedToolOutput.Params | None" = None):
        self.params = params or self.Params()
        self.pin = self.params.pin
        self.min_tokens = self.params.min_tokens

    def parts(self, gap_s: float, appended_tokens: int) -> list[tuple[float, int]]:
        n = self.params.chunks
        return [(gap_s * k / n, appended_tokens * k // n) for k in range(1, n)]


@dataclass
class _Gap:
    """One tool gap of one agent and the background prefills it started."""

    instance: object
    base_tokens: int                      # the prompt's tokens before the tool output
    in_flight: LLMRequest | None = None   # the background prefill queued or running
    done_upto: int = 0                    # tool-output tokens submitted so far
    gpu_s: float = 0.0
    open: bool = True                     # the gap has not ended yet
    called: bool | None = None            # whether the call came (None: not known yet)
    held: list = field(default_factory=list)  # [node, blocks, since_s] of the pin kept, or []


class PrefillAhead:
    """Runs a mechanism for every agent's tool gaps on the simulation's instances (engine wiring)."""

    def __init__(self, env: simpy.Environment, scenario, instances):
        ref = scenario.serving.prefill_ahead
        self.env = env
        self.name = ref.name
        self.mechanism: PrefillAheadMechanism = PREFILL_AHEAD.create(ref.name, ref.params)
        self.instances = instances
        self.block_tokens = scenario.cache.block_tokens
        self.gpus_per_instance = scenario.hardware.gpus_per_instance
        self._next_id = -1
        self._gaps: list[_Gap] = []
        self.stats = {"prefill_ahead_requests": 0, "prefill_ahead_cancelled": 0, "prefill_ahead_tokens": 0,
                      "prefill_ahead_gpu_s": 0.0, "prefill_ahead_pinned_block_s": 0.0}

    def tool_gap(self, request: LLMRequest, stream, appended_tokens: int, gap_s: float, prefill: bool = True):
        """SimPy generator for the agent's process: wait out the gap of ``gap_s`` after
        ``request`` (``stream`` already holds the ``appended_tokens`` of the tool output),
        prefilling parts ahead as they arrive when ``prefill``; returns the gap, to be closed
        with :meth:`outcome` once the agent knows whether it calls again."""
        env = self.env
        start = env.now
        instance = self.instances[request.instance] if request.instance >= 0 else None
        gap = _Gap(instance, stream.tokens - appended_tokens)
        parts = self.mechanism.parts(gap_s, appended_tokens) if prefill and instance is not None else []
        if parts:
            self._gaps.append(gap)
        for delay_s, arrived in parts:
            if start + delay_s > env.now:
                yield env.timeout(start + delay_s - env.now)
            if gap.in_flight is None and arrived - gap.done_upto >= self.mechanism.min_tokens:
                self._submit(gap, request, stream, arrived)
        end = start + gap_s
        if end > env.now:
            yield env.timeout(end - env.now)
        self._end(gap)
        return gap

    def outcome(self, gap: _Gap, called: bool) -> None:
        """The agent calls again after ``gap`` (or its session ends there)."""
        gap.called = called

    # --- background requests -------------------------------------------------------------------
    def _submit(self, gap: _Gap, request: LLMRequest, stream, arrived: int) -> None:
        tokens = gap.base_tokens + arrived
        keys = stream.full_block_keys(tokens)
        bg = LLMRequest(
            request_id=self._next_id, session_id=request.session_id, agent_class=request.agent_class,
            depth=request.depth, call_index=request.call_index, arrival_s=self.env.now, prompt_tokens=tokens,
            output_tokens=1, prompt_blocks=len(keys), total_keys=keys, done=self.env.event(), agent_id=request.agent_id,
        )
        self._next_id -= 1
        bg.background = True
        bg.keep_pin = self.mechanism.pin
        bg.prefill_gap = gap
        gap.in_flight = bg
        gap.done_upto = arrived
        self.stats["prefill_ahead_requests"] += 1
        gap.instance.submit_background(bg)

    def on_finish(self, bg: LLMRequest) -> None:
        """A background prefill finished (the instance committed its KV)."""
        gap: _Gap = bg.prefill_gap
        gap.in_flight = None
        now = self.env.now
        if not bg.rejected:
            cost_s = gap.instance.cost.prefill_s(bg.prefilled_tokens, bg.hit_tokens) * self.gpus_per_instance
            gap.gpu_s += cost_s
            self.stats["prefill_ahead_gpu_s"] += cost_s
            self.stats["prefill_ahead_tokens"] += bg.prefilled_tokens
        node = bg.held_node
        bg.held_node = None
        if node is None:
            return
        self._release(gap, now)
        if gap.open:
            gap.held = [node, bg.prompt_blocks, now]
        else:
            gap.instance.cache.unpin(node)

    def _release(self, gap: _Gap, now: float) -> None:
        if gap.held:
            node, blocks, since = gap.held
            gap.instance.cache.unpin(node)
            self.stats["prefill_ahead_pinned_block_s"] += blocks * (now - since)
            gap.held = []

    def _end(self, gap: _Gap) -> None:
        """The tool output is complete: drop a background prefill not started yet (the call
        covers it) and release the kept pin (the call pins its own path)."""
        gap.open = False
        if gap.in_flight is not None and gap.instance.cancel_background(gap.in_flight):
            gap.in_flight = None
            self.stats["prefill_ahead_cancelled"] += 1
        self._release(gap, self.env.now)

    # --- results -------------------------------------------------------------------------------
    def summary(self, simulated_s: float) -> dict:
        """Counters of the run; a gap whose call had not come when the run ended is wasted."""
        now = self.env.now
        held_s = self.stats["prefill_ahead_pinned_block_s"]
        for gap in self._gaps:
            if gap.held:
                held_s += gap.held[1] * (now - gap.held[2])
        wasted = [gap for gap in self._gaps if gap.called is not True]
        out = {"prefill_ahead": self.name, **self.stats, "prefill_ahead_pinned_block_s": held_s,
               "prefill_ahead_gaps": len(self._gaps),
               "prefill_ahead_wasted_gaps": sum(1 for gap in wasted if gap.gpu_s > 0),
               "prefill_ahead_wasted_gpu_s": sum(gap.gpu_s for gap in wasted),
               "prefill_ahead_pinned_blocks_mean": held_s / simulated_s if simulated_s > 0 else 0.0}
        return out


__all__ = ["NoPrefillAhead", "PREFILL_AHEAD", "PrefillAhead", "PrefillAheadMechanism", "StreamedToolOutput"]
