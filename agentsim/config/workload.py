"""The workload section of a scenario: agent classes, their arrivals, sub-agents, compaction
and edits (re-exported by :mod:`agentsim.config.scenario`).

Token counts and gaps are distributions (:mod:`agentsim.config.distributions`) whose samples
must not fall below zero; a class whose every session would overflow its context window at the
first call, or whose compaction can never fire, is refused here rather than run to no result.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from agentsim.config.base import Strict
from agentsim.config.distributions import DistributionSpec, require_support_at_least, support
from agentsim.config.units import Seconds
from agentsim.errors import FieldError


class Arrival(Strict):
    """How sessions of an agent class arrive.

    ``poisson``: sessions start at ``rate_per_s`` (exponential inter-arrivals) until the end of the
    run. ``population``: ``concurrent`` sessions are kept alive; when one ends, a new one starts
    after ``restart_delay_s``.
    """

    kind: Literal["poisson", "population"] = "population"
    rate_per_s: float | None = Field(None, gt=0)
    concurrent: int | None = Field(None, gt=0)
    ramp_s: Seconds = Field(0.0, ge=0, description="population: spread the initial session starts uniformly over this time")
    restart_delay_s: Seconds = Field(0.0, ge=0)
    diurnal: list[float] | None = Field(None, description="poisson: 24 hourly rate multipliers (hour 0 starts at t=0), repeating daily")
    bursts: list["Burst"] = Field(default_factory=list, description="poisson: windows where the rate is multiplied")

    @field_validator("diurnal")
    @classmethod
    def _diurnal_shape(cls, value):
        if value is not None:
            if len(value) != 24:
                raise ValueError(f"diurnal needs 24 hourly multipliers, got {len(value)}")
            if any(v < 0 for v in value) or not any(v > 0 for v in value):
                raise ValueError("diurnal multipliers must be >= 0 and not all zero")
        return value

    #: Keys that only one arrival kind reads: given to the other kind they would be ignored.
    KIND_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {"poisson": ("rate_per_s", "diurnal", "bursts"),
                 "population": ("concurrent", "ramp_s", "restart_delay_s")}

    @model_validator(mode="after")
    def _check_kind(self):
        if self.kind == "poisson" and self.rate_per_s is None:
            raise FieldError(("rate_per_s",), "a poisson arrival needs rate_per_s")
        if self.kind == "population" and self.concurrent is None:
            raise FieldError(("concurrent",), "a population arrival needs concurrent")
        for kind, keys in self.KIND_KEYS.items():
            if kind == self.kind:
                continue
            for key in keys:
                # A value other than the default: a resolved scenario (a sweep cell, a
                # scenario.resolved.yaml) spells every key out with its default.
                field = type(self).model_fields[key]
                if getattr(self, key) != field.get_default(call_default_factory=True):
                    raise FieldError((key,), f"{key} belongs to a {kind} arrival, and this one is kind {self.kind} "
                                             f"(it would be ignored); remove it or set kind: {kind}")
        return self

    def peak_rate_per_s(self) -> float:
        """Poisson: an upper bound of the session start rate (diurnal peak times every burst)."""
        peak = (self.rate_per_s or 0.0) * (max(self.diurnal) if self.diurnal else 1.0)
        for burst in self.bursts:
            peak *= max(1.0, burst.multiplier)
        return peak


class Burst(Strict):
    """A burst: between ``start_s`` and ``start_s + duration_s`` the arrival rate is multiplied."""

    start_s: Seconds = Field(ge=0)
    duration_s: Seconds = Field(gt=0)
    multiplier: float = Field(gt=0)


class SubAgents(Strict):
    """Sub-agent fan-out: after a call, with ``probability`` the agent spawns ``fanout``
    sub-agents that share its history as their prefix, run concurrently, and are joined
    before the parent's next call."""

    probability: float = Field(0.0, ge=0, le=1)
    fanout: DistributionSpec = Field(default=2)
    calls: DistributionSpec = Field(default=5, description="LLM calls each sub-agent makes")
    system_tokens: int = Field(0, ge=0, description="the sub-agents' own system/tools prompt, after the parent's prefix (shared by siblings)")
    task_tokens: DistributionSpec = Field(default=2000, description="tokens of the sub-agent's own task appended to the shared prefix")
    result_tokens: DistributionSpec = Field(default=1000, description="tokens the parent appends when it joins a sub-agent")

    @field_validator("fanout", "calls", "task_tokens", "result_tokens")
    @classmethod
    def _non_negative(cls, spec, info):
        return require_support_at_least(spec, 0, info.field_name)


class Compaction(Strict):
    """Context mutation: when a session's context exceeds ``trigger_tokens`` it is rewritten to
    ``keep_tokens`` (a summary), invalidating cached blocks past the shared prefix."""

    trigger_tokens: int = Field(gt=0)
    keep_tokens: int = Field(gt=0)

    @model_validator(mode="after")
    def _keep_below_trigger(self):
        if self.keep_tokens >= self.trigger_tokens:
            raise FieldError(("keep_tokens",), "keep_tokens must be smaller than trigger_tokens")
        return self


class Edits(Strict):
    """Context edits: after a call, with ``probability`` the agent drops stale tool output at a
    depth (a uniform fraction of its private history between ``min_depth_fraction`` and 1);
    ``dropped_tokens`` are removed there and everything after is rewritten, so cached blocks
    past that offset no longer match."""

    probability: float = Field(0.0, ge=0, le=1)
    min_depth_fraction: float = Field(0.3, ge=0, le=1)
    dropped_tokens: DistributionSpec = Field(default=2000)

    @field_validator("dropped_tokens")
    @classmethod
    def _non_negative(cls, spec, info):
        return require_support_at_least(spec, 0, info.field_name)


class AgentClass(Strict):
    """One kind of agent (coding agent, chat user, batch tool agent ...)."""

    arrival: Arrival
    tools_prefix_tokens: int = Field(12000, ge=0, description="system + tool definitions shared by every session of this class")
    initial_context_tokens: DistributionSpec = Field(default=2000, description="the session's first user message")
    calls_per_session: DistributionSpec = Field(default=20, description="LLM calls per session")
    tool_gap_s: DistributionSpec = Field(default=9.0, description="seconds between a call ending in a tool call and the next call")
    human_turn_probability: float = Field(0.1, ge=0, le=1, description="chance a call ends the turn and waits for a human")
    human_gap_s: DistributionSpec = Field(default=210.0, description="seconds a human takes before the next turn")
    appended_tokens: DistributionSpec = Field(default=1500, description="tokens appended to the context per call (tool results, user text)")
    output_tokens: DistributionSpec = Field(default=300, description="tokens generated per call")
    max_context_tokens: int = Field(200_000, gt=0, description="prompts are capped at this length (the model's window)")
    subagents: SubAgents = Field(default_factory=SubAgents)
    compaction: Compaction | None = None
    edits: Edits | None = None

    @field_validator("initial_context_tokens", "calls_per_session", "tool_gap_s", "human_gap_s",
                     "appended_tokens", "output_tokens")
    @classmethod
    def _non_negative(cls, spec, info):
        # Gaps and token counts cannot be negative (calls and outputs below one are drawn as one).
        return require_support_at_least(spec, 0, info.field_name)

    @model_validator(mode="after")
    def _fits_the_window(self):
        """A class that cannot do what it describes: every first prompt past the window (each
        session would end context-full before its first call), or a compaction that the window
        ends first (a context is full at ``max_context_tokens`` and never reaches the trigger)."""
        first_tokens = self.tools_prefix_tokens + support(self.initial_context_tokens)[0]
        if first_tokens > self.max_context_tokens:
            raise FieldError(("initial_context_tokens",),
                             f"every first prompt holds at least {first_tokens:,.0f} tokens (tools_prefix_tokens plus "
                             f"initial_context_tokens), more than max_context_tokens ({self.max_context_tokens:,}): "
                             "each session would end before its first call")
        if self.compaction is not None and self.compaction.trigger_tokens > self.max_context_tokens:
            raise FieldError(("compaction", "trigger_tokens"),
                             f"trigger_tokens ({self.compaction.trigger_tokens:,}) is above max_context_tokens "
                             f"({self.max_context_tokens:,}): a session's context is full before compaction can fire")
        return self


class WorkloadConfig(Strict):
    global_system_prompt_tokens: int = Field(0, ge=0, description="prompt prefix shared by every agent class")
    agent_classes: dict[str, AgentClass] = Field(min_length=1)


Arrival.model_rebuild()
