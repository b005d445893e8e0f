"""TTL-pin (policies spec sections 1.5 and 4.1): keep a paused agent's KV pinned during its tool call.

A wrapper over a base eviction policy (``base``, default ``lru``). At ``on_tool_start(owner,
node, gap, now)`` (an LLM call ended with a tool call; the engine calls it while the finishing
request still pins its path) the wrapper takes its own pin on the agent's path, so when the
engine releases the request's pin the path stays pinned: the in-flight pin turns into a
*soft pin* held until ``min(tool end, now + tau)``:

* ``on_tool_end(owner)`` before the deadline releases it (``pins_honored``: the KV was still
  resident, as a pinned path cannot be evicted); the next call's MATCH/PIN takes over.
* At the deadline (``on_timer``), the pin is released (``pins_timed_out``); the KV becomes
  ordinary cache ranked by the base policy, it is not deleted.
* **Pressure unpin**: when the base policy has no evictable victim left (the allocation would
  fail), pins are released one at a time, in ``pressure_order``, and the base is asked again
  (``pins_broken_by_pressure``). Only then does the caller queue.

Pins are real pin counts on the cache path (``cache.pin``/``cache.unpin``), so every base policy
and the tiered cache honour them unchanged; a shared ancestor stays pinned while any owner pins
it. Eviction reasons: the cache reports these evictions as ``capacity``; the wrapper counts the
blocks whose pin had timed out (``evicted_after_pin_timeout_blocks``) or been broken by
pressure (``evicted_after_pressure_unpin_blocks``) and that were evicted before any reuse; run
diagnostics report them as reasons ``pin_timeout`` and ``pressure_unpin``.

``tau_s = 0`` never pins: the run equals the base policy event for event (spec section 6).
``tau_s = inf`` pins until the tool returns (InferCept "preserve"). Pauses of kinds not in
``pin_tools`` (default: human turns) are not pinned. Subclasses choose tau per call
(:meth:`TTLPin.tau_for`, e.g. Continuum's adaptive tau).
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies.ttl_expiry import _Delegate

WRAPPERS = ("ttl_expiry", "ttl_5m", "ttl_1h", "ttl_pin", "continuum", "infercept", "kvflow")


def _node(x):
    """The tree node behind a policy's view of it (a tier entry in a tiered cache)."""
    return getattr(x, "node", x)


class PinWrapperParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base: str = Field("lru", description="eviction policy ranking unpinned blocks")
    base_params: dict[str, Any] = Field(default_factory=dict, description="parameters of the base policy")
    pin_tools: list[str] = Field(default_factory=lambda: ["tool"],
                                 description="pause kinds that are pinned (tool, human)")
    pressure_order: Literal["most_remaining", "oldest"] = Field(
        "most_remaining", description="pressure unpin: largest expected remaining pause first, or oldest pin first")

    @model_validator(mode="after")
    def _check_base(self):
        if self.base in WRAPPERS:
            raise ValueError(f"base must be a plain eviction policy, not the wrapper {self.base!r}")
        if self.base not in EVICTION_POLICIES:
            raise ValueError(EVICTION_POLICIES.unknown_message(self.base))
        EVICTION_POLICIES.validate_params(self.base, self.base_params)
        return self


class TTLPinParams(PinWrapperParams):
    tau_s: float = Field(60.0, ge=0, description="pin lifetime in seconds (0 = never pin, inf = until the tool returns)")


class Pin:
    __slots__ = ("owner", "node", "start_s", "deadline_s", "expected_end_s", "tool")

    def __init__(self, owner, node, start_s, deadline_s, expected_end_s, tool):
        self.owner = owner
        self.node = node
        self.start_s = start_s
        self.deadline_s = deadline_s
        self.expected_end_s = expected_end_s
        self.tool = tool


class PinWrapper(_Delegate):
    """Soft pins over a base policy; subclasses decide per pause (see module docstring)."""

    Params = PinWrapperParams

    def __init__(self, params=None):
        super().__init__(params)
        self.pins: dict[Any, Pin] = {}
        self._deadlines: list = []            # (deadline_s, seq, owner, pin)
        self._seq = 0
        self._released: dict = {}             # node -> "pin_timeout" | "pressure_unpin" until reused
        self.pins_created = 0
        self.pins_honored = 0
        self.pins_timed_out = 0
        self.pins_broken_by_pressure = 0
        self.evicted_after = {"pin_timeout": 0, "pressure_unpin": 0}
        self.pinned_s_total = 0.0
        self.max_pin_s = 0.0

    def bind(self, cache):
        super().bind(cache)
        self.base.bind(cache)
        self._adopt_trim_in_place()

    # Path-touch shortcuts of the base hold while no node carries a release tag (on_access
    # only drops tags); the cache reads these before every path-touch.
    @property
    def access_leaf_only(self) -> bool:
        return self.base.access_leaf_only and not self._released

    @property
    def access_evictable_only(self) -> bool:
        return self.base.access_evictable_only and not self._released

    @property
    def tree(self):
        """The cache that owns pins (a tier view's owner in a tiered cache)."""
        return getattr(self.cache, "owner", self.cache)

    # --- pins --------------------------------------------------------------------------------
    def pin(self, owner, node, now_s: float, tau_s: float, expected_end_s: float, tool: str) -> None:
        if owner in self.pins:  # a pause without its end (should not happen): drop the old pin
            self._release(self.pins.pop(owner), now_s, None)
        node = _node(node)
        if tau_s <= 0 or not node.alive or node.parent is None:
            return
        self.tree.pin(node)
        pin = Pin(owner, node, now_s, now_s + tau_s, expected_end_s, tool)
        self.pins[owner] = pin
        self.pins_created += 1
        if math.isfinite(pin.deadline_s):
            self._seq += 1
            heapq.heappush(self._deadlines, (pin.deadline_s, self._seq, owner, pin))

    def _release(self, pin: Pin, now_s: float, reason: str | None) -> None:
        held = max(0.0, now_s - pin.start_s)
        self.pinned_s_total += held
        self.max_pin_s = max(self.max_pin_s, held)
        self.tree.unpin(pin.node)
        if reason is not None:
            node = pin.node
            while node.parent is not None and node.alive and node.lock_ref == 0:
                self._released[node] = reason
                node = node.parent

    def on_tool_end(self, owner, now_s):
        pin = self.pins.pop(owner, None)
        if pin is not None:
            self.pins_honored += 1
            self._release(pin, now_s, None)

    def next_timer_s(self):
        heap = self._deadlines
        while heap and self.pins.get(heap[0][2]) is not heap[0][3]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def on_timer(self, now_s):
        heap = self._deadlines
        while heap and heap[0][0] <= now_s:
            _deadline, _seq, owner, pin = heapq.heappop(heap)
            if self.pins.get(owner) is pin:
                del self.pins[owner]
                self.pins_timed_out += 1
                self._release(pin, now_s, "pin_timeout")

    def expected_remaining_s(self, pin: Pin, now_s: float) -> float:
        """Pressure-unpin rank: how long the pin would still be needed (largest goes first)."""
        return min(pin.deadline_s, pin.expected_end_s) - now_s

    def _pressure_victim(self, now_s: float) -> Pin | None:
        if not self.pins:
            return None
        if self.params.pressure_order == "oldest":
            return min(self.pins.values(), key=lambda p: p.start_s)
        return min(self.pins.values(), key=lambda p: (-self.expected_remaining_s(p, now_s), p.start_s))

    def pop_victim(self, now_s):
        victim = self.base.pop_victim(now_s)
        while victim is None:
            pin = self._pressure_victim(now_s)
            if pin is None:
                return None
            del self.pins[pin.owner]
            self.pins_broken_by_pressure += 1
            self._release(pin, now_s, "pressure_unpin")
            victim = self.base.pop_victim(now_s)
        return victim

    # --- eviction-reason bookkeeping ------------------------------------------------------------
    def on_access(self, node, now_s, hit=False):
        if self._released:
            self._released.pop(_node(node), None)
        self.base.on_access(node, now_s, hit)  # _Delegate's forwarding, one frame less

    def on_split(self, upper, lower):
        if self._released:
            reason = self._released.get(_node(lower))
            if reason is not None:
                self._released[_node(upper)] = reason
        self.base.on_split(upper, lower)

    def on_remove(self, node, blocks, reason):
        if self._released:
            n = _node(node)
            tag = self._released.get(n)
            if tag is not None:
                if reason == "capacity":
                    self.evicted_after[tag] += blocks
                # A node trimmed in place (alive, not a tier entry) keeps its tag, as the upper
                # part of a split inherits it.
                if not n.alive or (reason != "capacity" and n is not node):
                    self._released.pop(n, None)
        self.base.on_remove(node, blocks, reason)

    def counters(self):
        return {
            "pins_created": self.pins_created,
            "pins_honored": self.pins_honored,
            "pins_timed_out": self.pins_timed_out,
            "pins_broken_by_pressure": self.pins_broken_by_pressure,
            "pins_active": len(self.pins),
            "evicted_after_pin_timeout_blocks": self.evicted_after["pin_timeout"],
            "evicted_after_pressure_unpin_blocks": self.evicted_after["pressure_unpin"],
            "max_pin_s": self.max_pin_s,
        }

    def describe(self):
        out = super().describe()
        out["base"] = self.base.describe()
        return out


@EVICTION_POLICIES.register("ttl_pin")
class TTLPin(PinWrapper):
    """Static TTL-pin: a paused agent's path stays pinned until min(tool end, now + tau_s)."""

    Params = TTLPinParams

    def tau_for(self, owner, tool: str, predicted_gap_s: float, node, now_s: float) -> float:
        return self.params.tau_s

    def on_tool_start(self, owner, node, predicted_gap_s, now_s, tool="tool"):
        if tool not in self.params.pin_tools:
            return
        tau = self.tau_for(owner, tool, predicted_gap_s, node, now_s)
        # Static TTL-pin does not know the pause: its pressure rank is the remaining pin time.
        self.pin(owner, node, now_s, tau, math.inf, tool)
