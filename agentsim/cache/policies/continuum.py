"""Continuum-style adaptive TTL-pin (policies spec section 4.1; Li et al., arXiv 2511.02230).

A TTL-pin (:mod:`agentsim.cache.policies.ttl_pin`) whose tau is chosen per pause from the history
of that pause kind's durations (``tool`` or ``human``: the simulator's tool names):

    tau* = argmax over tau in grid of  P(T <= tau) * B  -  C * E[min(T, tau)]

per pinned block, with ``B = recompute_s_per_block`` (the avoided recompute time of a block
when the tool returns while the KV is pinned) and ``C = mem_cost_per_block_s`` (the opportunity
cost of holding one block for one second). Both terms scale with the pinned path's length, so
tau does not depend on it. The grid is 0 and the ``quantiles`` of the duration distribution;
ties go to the smaller tau (so tau = 0, no pin, when the benefit cannot pay the cost).

* Distribution: the empirical CDF of the last ``window`` durations of that kind (measured from
  tool start to tool end, never the agent's pre-sampled gap: Continuum is not clairvoyant).
  Cold start (fewer than ``min_samples``): an exponential with the mean of all kinds' history,
  or ``cold_start_mean_s`` before any history.
* Pressure unpin: largest *expected remaining* pause first, ``E[T - a | T > a]`` for a pin held
  ``a`` seconds (from the same distribution), ties by oldest pin.

[sim-choice] Continuum's program-level FCFS (a returning turn keeps its program's priority) is a
scheduler feature and is not modelled: the returning call queues FCFS like any other.
Reduction (spec section 6): ``recompute_s_per_block = 0`` never pins, so it equals the base.
Defaults: B = 1 ms per 64-token block (DeepSeek-V3-class prefill on 4 GB300 at ~50% MFU),
C = 3e-5 s per block-second (1 / ~35K blocks of an 80 GB KV budget: holding the whole cache for
one second costs one second of service) [sim-choice; tune per scenario].
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from pydantic import Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies.ttl_pin import PinWrapper, PinWrapperParams


class ContinuumParams(PinWrapperParams):
    recompute_s_per_block: float = Field(1e-3, ge=0, description="benefit B: recompute time saved per pinned block (s)")
    mem_cost_per_block_s: float = Field(3e-5, ge=0, description="cost C: holding one block for one second (s of service)")
    window: int = Field(1000, gt=0, description="durations kept per pause kind (sliding window)")
    min_samples: int = Field(20, gt=0, description="below this many samples of a kind, use the exponential cold start")
    cold_start_mean_s: float = Field(10.0, gt=0, description="exponential mean before any duration was seen (s)")
    quantiles: list[float] = Field(default_factory=lambda: [0.5, 0.75, 0.9, 0.95, 0.99],
                                   description="candidate taus: these quantiles of the duration distribution (and 0)")


class DurationModel:
    """Sliding-window empirical distribution of pause durations, with an exponential fallback."""

    def __init__(self, window: int):
        self.samples: deque[float] = deque(maxlen=window)
        self._sorted: list[float] | None = None

    def add(self, duration_s: float) -> None:
        self.samples.append(duration_s)
        self._sorted = None

    def sorted(self) -> list[float]:
        if self._sorted is None:
            self._sorted = sorted(self.samples)
        return self._sorted

    def __len__(self) -> int:
        return len(self.samples)


@EVICTION_POLICIES.register("continuum")
class Continuum(PinWrapper):
    """Adaptive TTL-pin: tau per pause from the duration history (net benefit), pressure unpin."""

    Params = ContinuumParams

    def __init__(self, params=None):
        super().__init__(params)
        self.models: dict[str, DurationModel] = {}
        self._all = DurationModel(self.params.window)
        self._started: dict = {}          # owner -> (start_s, tool), every pause, pinned or not
        self.taus_chosen: dict[str, float] = {}

    # --- the distribution ------------------------------------------------------------------------
    def _samples(self, tool: str) -> list[float] | None:
        model = self.models.get(tool)
        if model is not None and len(model) >= self.params.min_samples:
            return model.sorted()
        return None

    def _exp_mean(self) -> float:
        return (sum(self._all.samples) / len(self._all)) if len(self._all) else self.params.cold_start_mean_s

    def choose_tau(self, tool: str) -> float:
        p = self.params
        gain, cost = p.recompute_s_per_block, p.mem_cost_per_block_s
        samples = self._samples(tool)
        candidates: list[tuple[float, float, float]] = [(0.0, 0.0, 0.0)]  # (tau, P(T<=tau), E[min(T,tau)])
        if samples is None:
            mean = self._exp_mean()
            for q in p.quantiles:
                tau = -mean * math.log(1.0 - q)
                cdf = 1.0 - math.exp(-tau / mean)
                candidates.append((tau, cdf, mean * cdf))
        else:
            n = len(samples)
            prefix = [0.0]
            for value in samples:
                prefix.append(prefix[-1] + value)
            for q in p.quantiles:
                tau = samples[min(n - 1, int(math.ceil(q * n)) - 1)]
                k = bisect.bisect_right(samples, tau)
                candidates.append((tau, k / n, (prefix[k] + tau * (n - k)) / n))
        best_tau, best = 0.0, 0.0
        for tau, cdf, held in candidates:
            value = cdf * gain - cost * held
            if value > best + 1e-15:
                best_tau, best = tau, value
        self.taus_chosen[tool] = best_tau
        return best_tau

    def expected_remaining_s(self, pin, now_s: float) -> float:
        """E[T - a | T > a] for a pin held a seconds (exponential: memoryless mean)."""
        age = now_s - pin.start_s
        samples = self._samples(pin.tool)
        if samples is None:
            return self._exp_mean()
        k = bisect.bisect_right(samples, age)
        longer = samples[k:]
        if not longer:
            return 0.0
        return sum(longer) / len(longer) - age

    # --- events --------------------------------------------------------------------------------------
    def on_tool_start(self, owner, node, predicted_gap_s, now_s, tool="tool"):
        self._started[owner] = (now_s, tool)
        if tool not in self.params.pin_tools:
            return
        self.pin(owner, node, now_s, self.choose_tau(tool), math.inf, tool)

    def on_tool_end(self, owner, now_s):
        started = self._started.pop(owner, None)
        if started is not None:
            start_s, tool = started
            duration = now_s - start_s
            self.models.setdefault(tool, DurationModel(self.params.window)).add(duration)
            self._all.add(duration)
        super().on_tool_end(owner, now_s)

    def describe(self):
        out = super().describe()
        out["taus_chosen"] = dict(self.taus_chosen)
        return out
