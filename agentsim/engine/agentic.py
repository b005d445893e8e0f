"""Engine wiring of the policies' time and agent hooks (policies spec sections 1.3 and 5).

The cache layer has no clock of its own (no SimPy below ``engine/``); this module turns a
policy's declared hooks into SimPy events for one simulation:

* **Timers.** Every cache-tier policy that overrides ``next_timer_s`` gets a :class:`PolicyTimer`:
  a SimPy process wakes at ``policy.next_timer_s()`` and calls ``policy.on_timer(now_s)`` (TTL
  expiry frees expired runs, TTL-pins time out, InferCept moves paused KV). The timer is
  *poked* (its due time re-read) after every request end and every tool start or end on its
  instance, the only events that can make a deadline earlier; a stale wake-up is harmless
  (``on_timer`` finds nothing due). Policies without timers cost nothing.
* **Tool start / end.** A call whose agent pauses afterwards (``request.next_gap_kind`` is
  ``tool`` or ``human``) triggers ``policy.on_tool_start(owner, deepest_node, gap_s, now_s,
  tool=kind)`` at the request's end, after COMMIT and before the request's UNPIN, so a TTL-pin
  takes over the in-flight pin without a gap. ``owner`` is the agent id (a session's main
  conversation or one sub-agent) and ``gap_s`` the agent's own pre-sampled pause (exact:
  clairvoyant policies may use it, history-based ones ignore it). When the pause is over (the
  tool returned, the human answered), ``policy.on_tool_end(owner, now_s)`` is called on the
  instance that saw the start: before any history rewrite of the agent and before its next call
  is submitted, so the next call's MATCH/PIN takes over from the TTL-pin. Sub-agent joins and a
  session's last call do not pause the agent's KV (no event, except for a policy whose
  ``announced_gap_kinds`` name them: the Belady agent-oracle then hears of the next call, or
  that none is known, gap NaN, and drops the agent's stale "due now"). Installed only when the HBM
  policy overrides one of the two hooks (LRU runs keep their speed).
* **Admission filters** (A1, ``cache.admission: {name, params}``): set on every HBM-only
  cache; ``admit_all`` is the unfiltered run.
"""

from __future__ import annotations

import math
from typing import Any

from agentsim.cache.policies.admission import ADMISSION_FILTERS
from agentsim.cache.policy import EvictionPolicy
from agentsim.errors import InputError

PAUSE_KINDS = ("tool", "human")


def has_timers(policy: EvictionPolicy) -> bool:
    return type(policy).next_timer_s is not EvictionPolicy.next_timer_s


def has_tool_hooks(policy: EvictionPolicy) -> bool:
    cls = type(policy)
    return (cls.on_tool_start is not EvictionPolicy.on_tool_start
            or cls.on_tool_end is not EvictionPolicy.on_tool_end)


def tier_policies(cache) -> list[EvictionPolicy]:
    """The eviction policy of every tier of ``cache`` (HBM first)."""
    tiers = getattr(cache, "tiers", None)
    if tiers is not None:
        return [tier.policy for tier in tiers]
    return [cache.policy]


class PolicyTimer:
    """Calls ``policy.on_timer(now)`` when ``policy.next_timer_s()`` is due (see module docstring)."""

    def __init__(self, env, policy: EvictionPolicy):
        self.env = env
        self.policy = policy
        self.scheduled_s = math.inf
        self.generation = 0
        self.fired = 0

    def poke(self) -> None:
        due = self.policy.next_timer_s()
        if due is None or due >= self.scheduled_s:
            return
        self.scheduled_s = due
        self.generation += 1
        self.env.process(self._wake(due, self.generation))

    def _wake(self, due_s: float, generation: int):
        yield self.env.timeout(max(0.0, due_s - self.env.now))
        if generation != self.generation:
            return  # superseded by an earlier deadline
        self.scheduled_s = math.inf
        self.fired += 1
        self.policy.on_timer(self.env.now)
        self.poke()


class AgenticWiring:
    """Timers, tool events and admission filters of one simulation (see module docstring)."""

    def __init__(self, env, scenario, instances: list, driver):
        self.env = env
        self.instances = instances
        self.timers: dict[int, list[PolicyTimer]] = {}
        self.paused: dict[Any, Any] = {}   # agent id -> instance holding its paused KV
        self.tool_starts = 0
        self.tool_ends = 0
        self._setup_admission(scenario)
        any_hooks = False
        for inst in instances:
            policies = tier_policies(inst.cache)
            self.timers[inst.instance_id] = [PolicyTimer(env, p) for p in policies if has_timers(p)]
            if has_tool_hooks(policies[0]):
                inst.before_unpin = self._before_unpin
                any_hooks = True
        if any_hooks and hasattr(driver, "on_resume"):
            driver.on_resume = self._on_resume
        self.active = any(self.timers.values())

    def _setup_admission(self, scenario) -> None:
        ref = getattr(scenario.cache, "admission", None)
        if ref is None or ref.name == "admit_all" and not ref.params:
            return
        if ref.name not in ADMISSION_FILTERS:
            raise InputError(ADMISSION_FILTERS.unknown_message(ref.name), "scenario", "cache.admission.name")
        try:
            ADMISSION_FILTERS.validate_params(ref.name, ref.params)
        except Exception as exc:
            raise InputError(f"bad parameters for admission filter {ref.name!r}: {exc}", "scenario",
                             "cache.admission.params") from None
        for inst in self.instances:
            if getattr(inst.cache, "tiers", None) is not None:
                raise InputError("cache.admission filters apply to the HBM-only cache; this scenario enables "
                                 "cache.tiers (not supported yet)", "scenario", "cache.admission")
            inst.cache.admission = ADMISSION_FILTERS.create(ref.name, ref.params)

    # --- events ---------------------------------------------------------------------------------
    def poke(self, instance_id: int) -> None:
        for timer in self.timers.get(instance_id, ()):
            timer.poke()

    def on_request_end(self, request) -> None:
        if request.instance >= 0:
            self.poke(request.instance)

    def _before_unpin(self, request, node) -> None:
        kind = request.next_gap_kind
        if request.agent_id < 0:
            return
        inst = self.instances[request.instance]
        if kind not in PAUSE_KINDS:
            # No pause (a join, an unknown stop, the agent's last call): only a policy that
            # asks for it hears of the next call (gap NaN when it is not known in advance).
            policy = inst.cache.policy
            if kind in policy.announced_gap_kinds:
                policy.on_tool_start(request.agent_id, node, request.next_gap_s, self.env.now, tool=kind)
            return
        inst.cache.policy.on_tool_start(request.agent_id, node, request.next_gap_s, self.env.now, tool=kind)
        self.paused[request.agent_id] = inst
        self.tool_starts += 1
        self.poke(inst.instance_id)

    def _on_resume(self, agent_id, request) -> None:
        inst = self.paused.pop(agent_id, None)
        if inst is None:
            return
        inst.cache.policy.on_tool_end(agent_id, self.env.now)
        self.tool_ends += 1
        self.poke(inst.instance_id)

    def timer_wakeups(self) -> int:
        return sum(t.fired for timers in self.timers.values() for t in timers)
