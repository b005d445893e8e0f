"""Run diagnostics that explain a cache result (issue 4; policies spec sections 1.5, 6 T1-T2, 7).

Added to every run's ``summary.json`` (and the printed table) by the engine:

* ``evictions_by_reason_blocks``: HBM blocks removed, by reason, every reason always present:
  ``capacity`` (ordinary capacity eviction), ``ttl_expiry`` (TTL-expiry fired), ``pin_timeout``
  and ``pressure_unpin`` (capacity evictions of blocks whose TTL-pin had timed out, or had been
  broken by memory pressure, and that were not used since: reported by the pin policy and
  taken out of ``capacity``), ``mutation`` (history rewrites), ``admission`` (A1 filter
  rejects), plus any tier-movement reasons the cache reports (``tool_demote``, ...).
* TTL counters (spec T1, always emitted, 0 when the policy has no such mechanism):
  ``ttl_expirations_blocks``, ``capacity_evictions_blocks``, ``pins_created``, ``pins_honored``,
  ``pins_timed_out``, ``pins_broken_by_pressure``.
* ``characteristic_eviction_time_s`` (T_C): the block-weighted **median idle age** (now minus
  the block's last access) of the blocks HBM evicted for capacity; ``..._mean_s`` the mean. This
  is the measured counterpart of Che's approximation: under LRU a block survives about T_C
  after its last use, so a TTL ``tau`` can only fire when ``tau < T_C`` (plus, for
  TTL-pins, the time a block spends pinned). NaN when nothing was evicted for capacity. Exact
  up to :data:`EXACT_EVICTIONS` capacity evictions per tier and instance; a longer run folds the
  earlier ones into a log-binned histogram (the median then within 0.05%, mean and max exact).
  ``characteristic_eviction_time_max_s`` is the largest such age; ``max_pin_s`` the longest time
  a block was held unevictable (an in-flight request from admission to finish, or a TTL-pin).
* ``regime_by_tier`` (:mod:`agentsim.engine.regimes`): each cache tier's regime from its own
  removals: ``capacity_bound`` when capacity removed at least as many blocks as TTL expiry (a
  block is evicted before its TTL can fire), ``ttl_bound`` when TTL expiry removed more,
  ``no_eviction`` when neither removed any. ``regime`` is the regime of the tier a TTL applies
  to, or of HBM when no policy has a TTL, so it agrees with the evictions shown beside it;
  ``cache_exit_regime`` (tiers only) is the regime of the last tier, the one KV leaves the cache
  from. ``characteristic_eviction_time_by_tier_s`` gives each tier's T_C.
* TTL diagnostics against the tier the TTL applies to: ``ttl_s`` (the policy's TTL, or null),
  ``ttl_tier``, ``ttl_tier_characteristic_eviction_time_s`` (that tier's T_C), ``ttl_margin_s
  = ttl_s - that T_C``, and ``ttl_warning`` when the TTL never fired (and why).
* Headroom, from a **cache-only replay of the run's own request stream** (each
  instance's requests in admission order, matched on their prompt blocks and inserting prompt
  plus output blocks, no overlap, same HBM capacity): ``policy_replay_hit_ratio`` (the run's
  policy in the same replay: timers fire at the recorded admission times, no tool events);
  ``upper_bound_replay_hit_ratio``, the hit ratio no policy can exceed on that stream
  (:mod:`agentsim.cache.hit_bound`, a proven bound) and ``upper_bound_headroom = bound - policy``
  (>= 0 always); ``belady_replay_hit_ratio``, the Belady heuristic (furthest next use over the
  tree's leaves, its future = the recorded stream; not a proven optimum in prefix mode) and
  ``belady_headroom = belady - policy`` (nothing proves it >= 0).
  Block-weighted hit ratios, all in the same mode, so a difference is the policy's, not the
  timing's. In timed runs Belady itself is replay-only
  (a clairvoyant future depends on the timing the policy creates). Skipped (null) for caches
  with lower tiers, for streams of more than :data:`HEADROOM_MAX_BLOCKS` blocks and when the
  scenario sets ``run.belady_headroom: false`` (the stream is then not kept either); a stream is
  dropped the moment it exceeds the limit, so a long run does not hold every request's keys
  only to skip the replay. ``belady_headroom_skipped`` says why it was skipped (null: it ran).
"""

from __future__ import annotations

import math
import time
from array import array
from typing import Any

import numpy as np

from agentsim.cache.hit_bound import prefix_hit_upper_bound
from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policy import EvictionPolicy
from agentsim.engine.policy_factory import eviction_policy
from agentsim.cache.radix import RadixCache
from agentsim.cache.sequential import replay_sequence
from agentsim.engine.regimes import TTL_DIAGNOSTIC_KEYS, regime_of, tier_regimes, ttl_diagnostics
from agentsim.metrics.catalogue import EVICTION_REASONS

REASONS = EVICTION_REASONS   # the metric catalogue's list, so a summary and its figures agree
TTL_COUNTERS = ("ttl_expirations_blocks", "capacity_evictions_blocks", "pins_created", "pins_honored",
                "pins_timed_out", "pins_broken_by_pressure")
#: Replays of streams with more requested blocks than this are skipped (keeps big runs fast);
#: the stream is dropped as soon as it grows past it (its keys are most of a long run's memory).
HEADROOM_MAX_BLOCKS = 20_000_000


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The weighted median (lower median on exact halves); NaN for no weight."""
    if len(values) == 0 or weights.sum() <= 0:
        return float("nan")
    # One array of the sorted weights, summed in place, and one value taken through the order:
    # at a fleet's end the ages of 72 instances' tiers are millions, and each whole-length
    # temporary is tens of MB on top of the event loop's peak.
    order = np.argsort(values, kind="stable")
    cum = weights[order]
    np.cumsum(cum, out=cum)
    index = int(np.searchsorted(cum, cum[-1] / 2.0))
    return float(values[order[index]])


#: Capacity evictions a recorder keeps exactly (16 bytes each); past this it folds them into its
#: histogram of idle ages, so a long run's recorders stay bounded (a fleet day evicts tens of
#: millions of times: hundreds of MB of ages otherwise). Runs below it report exact statistics.
EXACT_EVICTIONS = 1 << 16
#: Idle-age histogram: bin 0 holds ages below ``_AGE_MIN_S`` (0 included), bin ``b >= 1`` ages in
#: ``[_AGE_MIN_S * r**(b-1), _AGE_MIN_S * r**b)`` with ``r = _AGE_BIN_RATIO``, up to 10**8 s.
#: A bin is reported as its geometric centre: within 0.05% of any age in it. The log-binned
#: histogram is DDSketch's idea; it is written here because the fold is one ``numpy.bincount``
#: over a buffer of evictions, where a sketch library adds values one Python call at a time.
_AGE_MIN_S = 1e-6
_AGE_BIN_RATIO = 1.001
_AGE_BINS = 2 + int(math.ceil(math.log(1e8 / _AGE_MIN_S) / math.log(_AGE_BIN_RATIO)))


def _age_bins(ages_s: np.ndarray) -> np.ndarray:
    """The histogram bin of each age (see ``_AGE_BINS``)."""
    scaled = np.maximum(ages_s, _AGE_MIN_S * 0.5) / _AGE_MIN_S
    bins = np.floor(np.log(scaled) / math.log(_AGE_BIN_RATIO)).astype(np.int64) + 1
    return np.clip(bins, 0, _AGE_BINS - 1)


def _age_of_bin(index: int) -> float:
    return 0.0 if index == 0 else _AGE_MIN_S * _AGE_BIN_RATIO ** (index - 0.5)


class EvictionAgeRecorder:
    """Records the idle age of blocks a cache tier evicts for capacity (wraps ``policy.on_remove``).

    The wrapper is an instance attribute shadowing the method, so the policy and the cache are
    unchanged; it costs one call per eviction event, none on the hit path. The last evictions
    (fewer than :data:`EXACT_EVICTIONS`) are kept exactly in ``ages_s`` / ``blocks``; earlier ones
    are folded into ``folded_blocks`` (blocks per idle-age bin) with their exact block-weighted
    age sum and largest age.
    """

    def __init__(self, env, policy: EvictionPolicy):
        self.env = env
        # Plain 8-byte values (a list held a float object per eviction: 32 bytes, not 8).
        self.ages_s = array("d")
        self.blocks = array("q")
        self.folded_blocks: np.ndarray | None = None
        self.folded_age_blocks_s = 0.0
        self.folded_max_s = -math.inf
        original = policy.on_remove
        ages_s, blocks_of = self.ages_s, self.blocks
        cap = EXACT_EVICTIONS

        def on_remove(node, blocks, reason, _original=original):
            if reason == "capacity":
                ages_s.append(env.now - node.last_access_s)
                blocks_of.append(blocks)
                if len(blocks_of) >= cap:
                    self.fold()
            _original(node, blocks, reason)

        policy.on_remove = on_remove

    def fold(self) -> None:
        """Move the exact evictions into the histogram (and empty the exact arrays in place)."""
        if not len(self.blocks):
            return
        ages = np.frombuffer(self.ages_s, dtype=np.float64)
        weights = np.frombuffer(self.blocks, dtype=np.int64).astype(np.float64)
        binned = np.bincount(_age_bins(ages), weights=weights, minlength=_AGE_BINS)
        self.folded_blocks = binned if self.folded_blocks is None else self.folded_blocks + binned
        self.folded_age_blocks_s += float((ages * weights).sum())
        self.folded_max_s = max(self.folded_max_s, float(ages.max()))
        del ages, weights                     # the arrays cannot shrink while exported
        del self.ages_s[:]
        del self.blocks[:]


def _age_stats(recorders: list[EvictionAgeRecorder]) -> tuple[float, float, float]:
    """(block-weighted median, mean, max) idle age at capacity eviction; NaN when none. Exact
    while no recorder has folded (see :data:`EXACT_EVICTIONS`); then the median is a histogram
    bin's centre (within 0.05%), the mean and the max stay exact."""
    # Concatenated from views of the recorders' arrays (no copy of each first), the block counts
    # converted to float as they are copied.
    ages = np.concatenate([np.frombuffer(r.ages_s, dtype=np.float64) for r in recorders] or [np.empty(0)])
    weights = np.concatenate([np.frombuffer(r.blocks, dtype=np.int64) for r in recorders] or [np.empty(0)],
                             dtype=np.float64)
    folded = [r for r in recorders if r.folded_blocks is not None]
    if not folded:
        if weights.sum() <= 0:
            return float("nan"), float("nan"), float("nan")
        return weighted_median(ages, weights), float((ages * weights).sum() / weights.sum()), float(ages.max())
    histogram = np.bincount(_age_bins(ages), weights=weights, minlength=_AGE_BINS)
    for r in folded:
        histogram += r.folded_blocks
    total = float(histogram.sum())
    if total <= 0:
        return float("nan"), float("nan"), float("nan")
    median_bin = int(np.searchsorted(np.cumsum(histogram), total / 2.0))
    weighted_sum = float((ages * weights).sum()) + sum(r.folded_age_blocks_s for r in folded)
    largest = max([r.folded_max_s for r in folded] + ([float(ages.max())] if len(ages) else []))
    return _age_of_bin(median_bin), weighted_sum / total, largest


def _policy_ttl_s(policy) -> float | None:
    for obj in (policy, getattr(policy, "base", None)):
        ttl = getattr(obj, "ttl_s", None)
        if isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
            return float(ttl)
    return None


def replay_stream(stream: list[tuple[float, int, list[int], list[int]]], capacity_blocks: int,
                  policy: EvictionPolicy) -> tuple[int, int]:
    """Serve ``stream`` [(admitted_s, request_id, prompt_keys, total_keys)] in order through one
    radix cache; returns (hit blocks, requested prompt blocks). The sequential replay loop
    (:func:`agentsim.cache.sequential.replay_sequence`): matched on the prompt, inserting prompt
    plus output; offline policies get the prompt sequence, timers fire at the recorded times."""
    cache = RadixCache(capacity_blocks, policy, name="replay")
    stats = replay_sequence(cache, [prompt for _t, _id, prompt, _total in stream],
                            times_s=[now_s for now_s, _id, _p, _total in stream],
                            totals=[total for _t, _id, _p, total in stream], label="headroom replay")
    return stats.hit_blocks, stats.requested_blocks


class RunDiagnostics:
    """Collects what the diagnostics need during a run and summarises it (see module docstring)."""

    def __init__(self, env, scenario, instances: list):
        self.env = env
        self.scenario = scenario
        self.instances = instances
        self.tiered = any(getattr(inst.cache, "tiers", None) is not None for inst in instances)
        # Idle ages at capacity eviction, per tier (index) of every instance. With lower tiers,
        # HBM "evictions" are demotions; KV leaves the cache only from the last tier, so that
        # tier's ages define the run's T_C; each tier's own T_C judges a TTL on that tier.
        self.tier_recorders: list[list[EvictionAgeRecorder]] = [
            [EvictionAgeRecorder(env, policy) for policy in self._tier_policies(inst)] for inst in instances]
        self.recorders = [recorders[-1] for recorders in self.tier_recorders]
        self.streams: dict[int, list] = {inst.instance_id: [] for inst in instances}
        # The headroom replay needs every request's keys; keep them only if it will run (not
        # with tiers, whose replay is not defined, nor when the scenario switches it off).
        self.keep_stream = not self.tiered and scenario.run.belady_headroom
        #: Why the headroom replay will not run (None while it may).
        self.headroom_skipped: str | None = (
            "lower tiers (the replay models one cache tier)" if self.tiered
            else None if scenario.run.belady_headroom else "run.belady_headroom is false")
        self.stream_blocks = 0      # total blocks (prompt plus output) of the kept stream
        self.max_inflight_s = 0.0   # longest in-flight pin (admission to finish) of any request

    def observe_request(self, request) -> None:
        """Record a finished request for the headroom replay (rejected ones never used the cache)."""
        if request.rejected or request.instance < 0:
            return
        inflight = request.finish_s - request.admitted_s
        if inflight > self.max_inflight_s:
            self.max_inflight_s = inflight
        if not self.keep_stream:
            return
        self.streams[request.instance].append(
            (request.admitted_s, request.request_id, request.prompt_keys, request.total_keys))
        self.stream_blocks += len(request.total_keys)
        if self.stream_blocks > HEADROOM_MAX_BLOCKS:
            self._drop_stream(f"request stream exceeded {HEADROOM_MAX_BLOCKS:,} blocks")

    def _drop_stream(self, reason: str) -> None:
        """Stop keeping the headroom stream and free what was kept (the replay is skipped)."""
        self.keep_stream = False
        self.headroom_skipped = reason
        self.streams = {instance: [] for instance in self.streams}

    @staticmethod
    def _tiers(inst) -> list:
        """The cache tiers of an instance, HBM first (a plain cache is its only tier)."""
        return list(getattr(inst.cache, "tiers", None) or [inst.cache])

    def _tier_policies(self, inst) -> list:
        return [tier.policy for tier in self._tiers(inst)]

    # --- summary -----------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The diagnostics' summary keys (see the module docstring)."""
        out, rest = self.summary_before_release()
        return rest.finish(out)

    def summary_before_release(self) -> tuple[dict[str, Any], "DeferredDiagnostics"]:
        """The summary's keys in their final order, with those that need only the eviction
        ages and the headroom stream still None; and what fills them in
        (:meth:`DeferredDiagnostics.finish`), which holds none of the live state. The
        statistics over the ages (sorts of every recorded eviction: tens of MB at a fleet's
        end) and the headroom replay (whole caches rebuilt) then run after the run has let go
        of its state (:func:`agentsim.engine.run_result.build_result`), not on top of it."""
        out: dict[str, Any] = {}
        reasons = {name: 0 for name in REASONS}
        counters = {name: 0 for name in TTL_COUNTERS}
        extra_counters: dict[str, int] = {}
        by_tier: dict[str, dict[str, int]] = {}
        last_tier_capacity = 0
        for inst in self.instances:
            tiers = self._tiers(inst)
            for tier in tiers:
                tier_reasons = by_tier.setdefault(tier.name, {})
                for reason, blocks in tier.evicted_by_reason.items():
                    tier_reasons[reason] = tier_reasons.get(reason, 0) + blocks
            last_tier_capacity += tiers[-1].evicted_by_reason.get("capacity", 0)
            for reason, blocks in inst.cache.evicted_by_reason.items():
                reasons[reason] = reasons.get(reason, 0) + blocks
            for tier in tiers[1:]:
                # TTL expiry below HBM also removes KV (or moves it further down).
                reasons["ttl_expiry"] += tier.evicted_by_reason.get("ttl_expiry", 0)
        if self.tiered:
            out["evictions_by_tier_and_reason_blocks"] = by_tier
        for inst in self.instances:
            for key, value in [kv for policy in self._tier_policies(inst) for kv in policy.counters().items()]:
                if not isinstance(value, (int, float)):
                    continue
                if key in counters:
                    counters[key] += value
                elif key.startswith("max_"):
                    extra_counters[key] = max(extra_counters.get(key, 0), value)
                else:
                    extra_counters[key] = extra_counters.get(key, 0) + value
        # Capacity evictions of blocks released by a pin time-out / pressure unpin are reported
        # under those reasons (the cache only knows "capacity").
        for reason in ("pin_timeout", "pressure_unpin"):
            moved = int(extra_counters.pop(f"evicted_after_{reason}_blocks", 0))
            moved = min(moved, reasons["capacity"])
            reasons[reason] += moved
            reasons["capacity"] -= moved
        counters["capacity_evictions_blocks"] = reasons["capacity"] + reasons["pin_timeout"] + reasons["pressure_unpin"]
        counters["ttl_expirations_blocks"] = max(counters["ttl_expirations_blocks"], reasons["ttl_expiry"])
        out["evictions_by_reason_blocks"] = reasons
        out.update({k: int(v) for k, v in counters.items()})
        for key, value in sorted(extra_counters.items()):
            out[f"policy_{key}"] = value
        out.update(dict.fromkeys(_AGE_KEYS))      # DeferredDiagnostics.finish fills them
        names = [tier.name for tier in self._tiers(self.instances[0])]
        # The longest time a block was held unevictable: an in-flight request, or a TTL-pin.
        out["max_pin_s"] = max(self.max_inflight_s, float(extra_counters.get("max_pin_s", 0.0)))
        ttl_by_tier = [_policy_ttl_s(policy) for policy in self._tier_policies(self.instances[0])]
        ttl_index = next((i for i, t in enumerate(ttl_by_tier) if t is not None), None)
        ttl_s = ttl_by_tier[ttl_index] if ttl_index is not None else None
        ttl_tier = names[ttl_index] if ttl_index is not None else None
        out["ttl_s"] = ttl_s
        # Each tier's removals; a single tier's are the run's (pin reasons moved out of capacity).
        tier_reasons = by_tier if self.tiered else {
            names[0]: {**reasons, "ttl_expiry": counters["ttl_expirations_blocks"]}}
        out["regime_by_tier"] = tier_regimes(tier_reasons)
        out.update(dict.fromkeys(TTL_DIAGNOSTIC_KEYS))   # from each tier's T_C: filled with the ages
        if self.tiered:
            # Blocks leave the cache for capacity only from the last tier (HBM evictions demote).
            out["cache_exit_capacity_blocks"] = int(last_tier_capacity)
            out["cache_exit_regime"] = regime_of(last_tier_capacity, counters["ttl_expirations_blocks"])
            out["regime"] = out["regime_by_tier"][ttl_tier or names[0]]
        else:
            out["regime"] = out["regime_by_tier"][names[0]]
        rest = DeferredDiagnostics(
            last_tier=[_EvictionAges.of(r) for r in self.recorders],
            by_tier={name: [_EvictionAges.of(recorders[index]) for recorders in self.tier_recorders]
                     for index, name in enumerate(names)},
            ttl_s=ttl_s, ttl_tier=ttl_tier, tier_reasons=tier_reasons, max_pin_s=out["max_pin_s"],
            simulated_s=float(self.env.now), headroom=self._headroom_inputs())
        return out, rest

    def _headroom_inputs(self) -> "_HeadroomInputs":
        """The kept streams (by reference) and each instance's HBM capacity: what the headroom
        replay reads, without the instances."""
        keep = self.keep_stream and self.stream_blocks > 0
        return _HeadroomInputs(
            skipped=self.headroom_skipped, empty_stream=self.keep_stream and self.stream_blocks == 0,
            streams=[(self.streams[inst.instance_id], inst.cache.capacity_blocks) for inst in self.instances] if keep else [],
            scenario=self.scenario)


#: The summary keys of the eviction ages' statistics, in their order.
_AGE_KEYS = ("characteristic_eviction_time_s", "characteristic_eviction_time_mean_s",
             "characteristic_eviction_time_max_s", "characteristic_eviction_time_by_tier_s")


class _EvictionAges:
    """A recorder's ages and block counts without the recorder (which its policy's wrapper, and
    through it the cache, keeps alive): what :func:`_age_stats` reads."""

    __slots__ = ("ages_s", "blocks", "folded_blocks", "folded_age_blocks_s", "folded_max_s")

    @classmethod
    def of(cls, recorder: EvictionAgeRecorder) -> "_EvictionAges":
        ages = cls()
        for name in cls.__slots__:
            setattr(ages, name, getattr(recorder, name))
        return ages


class _HeadroomInputs:
    """What the headroom replay reads: each instance's kept stream and HBM capacity."""

    __slots__ = ("skipped", "empty_stream", "streams", "scenario")

    def __init__(self, skipped, empty_stream, streams, scenario) -> None:
        self.skipped, self.empty_stream, self.streams, self.scenario = skipped, empty_stream, streams, scenario


class DeferredDiagnostics:
    """The diagnostics' summary keys that need none of the live state: the statistics of the
    eviction ages, the TTL diagnostics built on them, and the headroom replay
    (:meth:`RunDiagnostics.summary_before_release`)."""

    def __init__(self, last_tier, by_tier, ttl_s, ttl_tier, tier_reasons, max_pin_s, simulated_s, headroom) -> None:
        self.last_tier = last_tier
        self.by_tier = by_tier
        self.ttl_s, self.ttl_tier, self.tier_reasons = ttl_s, ttl_tier, tier_reasons
        self.max_pin_s, self.simulated_s = max_pin_s, simulated_s
        self.headroom = headroom

    def finish(self, out: dict[str, Any]) -> dict[str, Any]:
        """Fill ``out``'s deferred keys in place (their order kept) and add the headroom keys;
        returns ``out``. Once only: the ages and the stream are dropped as they are read."""
        t_c, t_c_mean, t_c_max = _age_stats(self.last_tier)
        out["characteristic_eviction_time_s"] = t_c
        out["characteristic_eviction_time_mean_s"] = t_c_mean
        out["characteristic_eviction_time_max_s"] = t_c_max
        out["characteristic_eviction_time_by_tier_s"] = {name: _age_stats(ages)[0] for name, ages in self.by_tier.items()}
        self.last_tier = self.by_tier = None
        out.update(ttl_diagnostics(self.ttl_s, self.ttl_tier, out["characteristic_eviction_time_by_tier_s"],
                                   self.tier_reasons, self.max_pin_s, self.simulated_s))
        out.update(_headroom(self.headroom))
        self.headroom = None
        return out


def _headroom(inputs: _HeadroomInputs) -> dict[str, Any]:
    """The headroom keys (module docstring) of the kept streams; what they need is in ``inputs``."""
    empty = {"belady_replay_hit_ratio": None, "policy_replay_hit_ratio": None, "belady_headroom": None,
             "upper_bound_replay_hit_ratio": None, "upper_bound_headroom": None,
             "belady_headroom_skipped": inputs.skipped}
    if inputs.empty_stream:
        return {**empty, "belady_headroom_skipped": "no request used the cache"}
    if not inputs.streams:
        return empty
    started = time.perf_counter()
    scenario = inputs.scenario
    ref = scenario.cache.eviction
    opt_hits = pol_hits = bound_hits = requested = 0
    for kept, capacity in inputs.streams:
        stream = sorted(kept, key=lambda r: (r[0], r[1]))
        if not stream:
            continue
        hits, req = replay_stream(stream, capacity, EVICTION_POLICIES.get("belady")())
        opt_hits += hits
        requested += req
        bound_hits += prefix_hit_upper_bound([prompt for _t, _id, prompt, _total in stream], capacity,
                                             [total for _t, _id, _p, total in stream]).hit_blocks
        if ref.name == "belady":
            pol_hits += hits
        else:
            policy = eviction_policy(ref, scenario)
            pol_hits += replay_stream(stream, capacity, policy)[0]
    if requested == 0:
        return {**empty, "belady_headroom_skipped": "no request used the cache"}
    opt = opt_hits / requested
    pol = pol_hits / requested
    bound = bound_hits / requested
    return {"belady_replay_hit_ratio": opt, "policy_replay_hit_ratio": pol, "belady_headroom": opt - pol,
            "upper_bound_replay_hit_ratio": bound, "upper_bound_headroom": bound - pol,
            "belady_headroom_skipped": None, "headroom_replay_wall_s": time.perf_counter() - started}
