"""Time series sampled during a run for the figures: evictions by reason and link traffic.

:class:`TimeSeriesSampler` is called by the engine's periodic sampler (the same instants as the
occupancy samples) and only *reads* state: it never advances a link's fluid model or touches a
policy's queues, so sampling cannot change a run's results.
"""

from __future__ import annotations

import pandas as pd

from agentsim.metrics.records import EvictionSample, LinkSample, RecordBuffer

_PIN_REASONS = ("pin_timeout", "pressure_unpin")


class TimeSeriesSampler:
    """Collects :class:`EvictionSample` and :class:`LinkSample` rows (columnar buffers); :meth:`tables` returns them."""

    def __init__(self, instances: list, hierarchy=None):
        self.instances = instances
        self.links = ([hierarchy.topology.all_links[name] for name in sorted(hierarchy.topology.all_links)]
                      if hierarchy is not None else [])
        self.evictions = RecordBuffer(EvictionSample)
        self.link_samples = RecordBuffer(LinkSample)

    def sample(self, now_s: float) -> None:
        for instance in self.instances:
            cache = instance.cache
            tiers = getattr(cache, "tiers", None) or [cache]
            for index, tier in enumerate(tiers):
                counts = dict(tier.evicted_by_reason)
                if index == 0:
                    # The cache only knows "capacity"; the pin policies say which of those blocks
                    # had been released by a time-out or pressure (as the run diagnostics do).
                    counters = cache.policy.counters()
                    for reason in _PIN_REASONS:
                        moved = min(int(counters.get(f"evicted_after_{reason}_blocks", 0) or 0), counts.get("capacity", 0))
                        if moved:
                            counts[reason] = counts.get(reason, 0) + moved
                            counts["capacity"] -= moved
                for reason in sorted(counts):
                    if counts[reason]:
                        self.evictions.append(EvictionSample(now_s, instance.instance_id, tier.name, reason,
                                                             int(counts[reason])))
        for link in self.links:
            # Read-only view of the fluid model: bytes and busy time as of now without advancing it.
            elapsed = now_s - link._last_s
            busy, moved = link.busy_s, link.bytes_total
            if link.active and elapsed > 0:
                busy += elapsed
                moved += min(link.bandwidth_bytes_per_s * elapsed, sum(tr.remaining_bytes for tr in link.active))
            self.link_samples.append(LinkSample(now_s, link.name, link.kind, link.bandwidth_bytes_per_s, moved, busy,
                                                len(link.active)))

    def tables(self) -> dict[str, pd.DataFrame]:
        """``evictions`` always (possibly empty), ``link_samples`` when the run has links."""
        return series_tables(*self.buffers())

    def buffers(self) -> tuple[RecordBuffer, RecordBuffer | None]:
        """The eviction samples' buffer, and the link samples' when the run has links: what
        :meth:`tables` builds its tables from (:func:`series_tables`), without the sampler."""
        return self.evictions, (self.link_samples if self.links else None)


def series_tables(evictions: RecordBuffer, link_samples: RecordBuffer | None) -> dict[str, pd.DataFrame]:
    """``evictions`` always (possibly empty), ``link_samples`` when given (a run with links)."""
    out = {"evictions": evictions.frame()}
    if link_samples is not None:
        out["link_samples"] = link_samples.frame()
    return out
