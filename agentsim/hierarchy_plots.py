"""Figures of the memory hierarchy over a run's tables: tier occupancy, evictions over time and
by reason, link utilisation (re-exported by :mod:`agentsim.plots`, whose conventions they
follow: long-form DataFrames in, a Figure out, :class:`PlotSkipped` when the data are absent)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from agentsim.hardware.tier_kinds import tier_names
from agentsim.metrics.catalogue import EVICTION_REASONS
from agentsim.plot_style import PlotSkipped, _require, _style

REASON_ORDER = list(EVICTION_REASONS)


def tier_occupancy(occupancy: pd.DataFrame, title: str | None = None) -> Figure:
    """Cache occupancy per tier over time (used / capacity, summed over instances), the pinned
    share of HBM, and below it the running and waiting requests (summed over instances).
    A run without lower tiers shows HBM only."""
    _require(occupancy, ["time_s", "tier", "used_blocks", "capacity_blocks"], "tier occupancy")
    agg = occupancy.groupby(["time_s", "tier"], sort=True)[["used_blocks", "capacity_blocks", "pinned_blocks"]].sum().reset_index()
    agg["used_fraction"] = agg.used_blocks / agg.capacity_blocks.where(agg.capacity_blocks > 0)
    tiers = [t for t in tier_names() if t in set(agg.tier)] + sorted(set(agg.tier) - set(tier_names()))
    minutes = agg.time_s.max() > 600
    scale, unit = (60.0, "min") if minutes else (1.0, "s")
    with _style():
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6.2), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
        palette = dict(zip(tiers, sns.color_palette("deep", len(tiers))))
        for tier in tiers:
            part = agg[agg.tier == tier]
            cap = part.capacity_blocks.max()
            ax.plot(part.time_s / scale, part.used_fraction, color=palette[tier], lw=1.8,
                    label=f"{tier} ({cap:,} blocks)")
        hbm = agg[agg.tier == tiers[0]]
        if "pinned_blocks" in hbm and hbm.pinned_blocks.sum() > 0:
            ax.plot(hbm.time_s / scale, hbm.pinned_blocks / hbm.capacity_blocks, color=palette[tiers[0]], ls=":",
                    lw=1.2, label=f"{tiers[0]} pinned by requests in flight")
        ax.set_ylabel("used / capacity")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=8, loc="lower right")
        ax.set_title(title or "Cache occupancy per tier over time")
        if {"running_requests", "waiting_requests"} <= set(occupancy.columns):
            first = occupancy[occupancy.tier == tiers[0]].groupby("time_s")[["running_requests", "waiting_requests"]].sum()
            ax2.plot(first.index / scale, first.running_requests, label="running (in a batch)", lw=1.4)
            ax2.plot(first.index / scale, first.waiting_requests, label="waiting (queued)", lw=1.4, color="C3")
            ax2.legend(fontsize=8, loc="upper left")
        ax2.set_ylabel("requests")
        ax2.set_xlabel(f"simulated time ({unit})")
        fig.tight_layout()
    return fig


def _interval_diffs(frame: pd.DataFrame, keys: list[str], value_cols: list[str]) -> pd.DataFrame:
    """Per-interval differences of cumulative counters sampled at ``time_s`` for each key.

    A key absent from early samples had a count of 0 then (cumulative samples start at the
    first non-zero value)."""
    times = np.sort(frame.time_s.unique())
    out = []
    for key, group in frame.groupby(keys, sort=True):
        group = group.set_index("time_s")[value_cols].reindex(times).ffill().fillna(0.0)
        diff = group.diff()
        diff.iloc[0] = group.iloc[0]
        diff = diff.reset_index().rename(columns={"index": "time_s"})
        key = key if isinstance(key, tuple) else (key,)
        for name, value in zip(keys, key):
            diff[name] = value
        out.append(diff)
    result = pd.concat(out, ignore_index=True)
    dt = pd.Series(np.diff(times, prepend=times[0] - (times[1] - times[0] if len(times) > 1 else 1.0)), index=times)
    result["interval_s"] = result.time_s.map(dt)
    return result


def evictions_over_time(evictions: pd.DataFrame, title: str | None = None) -> Figure:
    """Blocks evicted per second, by reason, over time; one panel per tier (summed over instances).

    ``evictions`` holds cumulative samples (:class:`agentsim.metrics.records.EvictionSample`).
    Capacity evictions mean the cache is too small for the working set; TTL expiries that the
    policy let blocks outlive their TTL; pin time-outs/pressure unpins come from TTL-pin
    policies; mutations from rewritten histories (compaction, edits)."""
    _require(evictions, ["time_s", "instance", "tier", "reason", "evicted_blocks"], "evictions over time")
    diffs = _interval_diffs(evictions, ["instance", "tier", "reason"], ["evicted_blocks"])
    agg = diffs.groupby(["tier", "reason", "time_s"], sort=True).agg(blocks=("evicted_blocks", "sum"),
                                                                     interval_s=("interval_s", "first")).reset_index()
    agg["rate"] = agg.blocks / agg.interval_s
    tiers = [t for t in tier_names() if t in set(agg.tier)] + sorted(set(agg.tier) - set(tier_names()))
    reasons = [r for r in REASON_ORDER if r in set(agg.reason)] + sorted(set(agg.reason) - set(REASON_ORDER))
    palette = dict(zip(reasons, sns.color_palette("colorblind", len(reasons))))
    minutes = agg.time_s.max() > 600
    scale, unit = (60.0, "min") if minutes else (1.0, "s")
    with _style():
        fig, axes = plt.subplots(len(tiers), 1, figsize=(9, 2.9 * len(tiers) + 0.6), sharex=True, squeeze=False)
        for ax, tier in zip(axes[:, 0], tiers):
            part = agg[agg.tier == tier].pivot_table(index="time_s", columns="reason", values="rate", aggfunc="sum").fillna(0.0)
            cols = [r for r in reasons if r in part.columns]
            totals = agg[agg.tier == tier].groupby("reason").blocks.sum()
            ax.stackplot(part.index / scale, *[part[c].to_numpy() for c in cols], colors=[palette[c] for c in cols],
                         labels=[f"{c} ({int(totals[c]):,} blocks)" for c in cols], alpha=0.85, step="pre")
            ax.set_ylabel("blocks / s")
            ax.set_title(f"{tier}: evictions by reason", fontsize=10)
            ax.legend(fontsize=8, loc="upper left")
        axes[-1, 0].set_xlabel(f"simulated time ({unit})")
        fig.suptitle(title or "Evictions by reason over time", fontsize=12)
        fig.tight_layout()
    return fig


def evictions_by_reason_bars(summary: dict, title: str | None = None) -> Figure:
    """Total blocks evicted by reason from a run's summary (for runs without the time series)."""
    counts = summary.get("evictions_by_reason_blocks") or summary.get("evicted_blocks_by_reason") or {}
    counts = {k: v for k, v in counts.items() if v}
    if not counts:
        raise PlotSkipped("evictions: nothing was evicted in this run")
    with _style():
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        sns.barplot(x=list(counts.values()), y=list(counts.keys()), ax=ax, color="C0")
        ax.set_xlabel("blocks evicted")
        ax.set_title(title or "Evictions by reason (whole run)")
        fig.tight_layout()
    return fig


def link_utilisation(link_samples: pd.DataFrame | None = None, links: pd.DataFrame | None = None,
                     title: str | None = None) -> Figure:
    """Link utilisation over time by link kind (NVLink, C2C, PCIe, NVMe, network): the mean over
    links of a kind (line) and the busiest link of that kind (shaded up to it); below, the
    throughput in GB/s summed over the kind. Utilisation of a link over an interval = the time
    it moved data / the interval (processor sharing: one transfer alone uses all bandwidth).

    Without a time series (``link_samples``) the ``links`` totals are drawn as bars of
    whole-run utilisation; without either the run had no links (HBM only)."""
    if link_samples is not None and len(link_samples):
        _require(link_samples, ["time_s", "link", "kind", "bytes", "busy_s"], "link utilisation")
        diffs = _interval_diffs(link_samples, ["link", "kind"], ["bytes", "busy_s"])
        diffs = diffs[diffs.interval_s > 0]
        diffs["utilisation"] = (diffs.busy_s / diffs.interval_s).clip(upper=1.0)
        diffs["gb_per_s"] = diffs.bytes / diffs.interval_s / 1e9
        kinds = sorted(diffs.kind.unique())
        palette = dict(zip(kinds, sns.color_palette("deep", len(kinds))))
        minutes = diffs.time_s.max() > 600
        scale, unit = (60.0, "min") if minutes else (1.0, "s")
        with _style():
            fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6.2), sharex=True)
            for kind in kinds:
                part = diffs[diffs.kind == kind].groupby("time_s")
                mean, peak = part.utilisation.mean(), part.utilisation.max()
                n_links = diffs[diffs.kind == kind].link.nunique()
                ax.plot(mean.index / scale, mean, color=palette[kind], lw=1.6, label=f"{kind} (mean of {n_links})")
                ax.fill_between(mean.index / scale, mean, peak, color=palette[kind], alpha=0.18, step=None)
                gbps = part.gb_per_s.sum()
                ax2.plot(gbps.index / scale, gbps, color=palette[kind], lw=1.4, label=kind)
            ax.set_ylabel("utilisation (busy fraction)")
            peak_all = float(diffs.utilisation.max())
            # Scale to the data: links are often nearly idle, and a 0-1 axis would hide them.
            ax.set_ylim(0, min(1.02, max(peak_all * 1.15, 1e-3)))
            ax.text(0.99, 0.97, f"busiest link, busiest interval: {peak_all:.1%}", transform=ax.transAxes,
                    ha="right", va="top", fontsize=8, color="0.3")
            ax.set_title(title or "Link utilisation over time (shaded up to the busiest link of each kind)")
            ax.legend(fontsize=8, loc="upper left")
            ax2.set_ylabel("throughput (GB/s, all links of a kind)")
            ax2.set_xlabel(f"simulated time ({unit})")
            fig.tight_layout()
        return fig
    if links is not None and len(links) and {"link", "utilisation"} <= set(links.columns):
        with _style():
            fig, ax = plt.subplots(figsize=(7, 0.3 * len(links) + 1.6))
            sns.barplot(data=links, x="utilisation", y="link", hue="kind" if "kind" in links else None, ax=ax, dodge=False)
            ax.set_xlabel("utilisation over the whole run (busy fraction)")
            ax.set_title(title or "Link utilisation (whole run; no time series in this run)")
            fig.tight_layout()
        return fig
    raise PlotSkipped("link utilisation: this run has no links (HBM-only cache; enable cache.tiers for DRAM/disk)")
