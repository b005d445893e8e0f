"""Seaborn figures over agentsim's result DataFrames, shared by ``agentsim report`` and notebooks.

Every function takes long-form DataFrames as written by a run or a sweep (``requests``,
``occupancy``, ``evictions``, ``link_samples``, ``links`` tables of a run directory; the
``results.parquet`` table of a sweep, one row per cell and seed with every summary key) and
returns a :class:`matplotlib.figure.Figure`. Nothing is saved or shown here: notebooks display the
figure, the report writes it as PNG.

When the data a figure needs are absent (an HBM-only run has no links, a run without evictions
has nothing to plot over time, a sweep without a Belady replay has no bound), the function
raises :class:`PlotSkipped` with a sentence saying why; the report prints that sentence instead
of the figure. Optional parts of a figure (the Belady line, the load column of the TTFT
breakdown) are left out with a note in the figure instead.

Units: times in seconds on log axes where they span decades; capacities in GB (10^9 bytes);
token counts in millions; utilisation as a fraction of the link's busy time.
"""

from __future__ import annotations

import math
from typing import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from agentsim.plot_style import (  # noqa: F401  (re-exported: notebooks call plots.<name>)
    POLICY_COLORS, PlotSkipped, _hue_order, _require, _style, hue_palette, label, policy_color, zoom_ratio_axis,
)
from agentsim.sweep_plots import cell_means, cost_vs_sla, metric_vs_axis  # noqa: F401  (re-exported)
from agentsim.hierarchy_plots import (  # noqa: F401  (re-exported)
    REASON_ORDER, _interval_diffs, evictions_by_reason_bars, evictions_over_time, link_utilisation, tier_occupancy)
from agentsim.metrics.catalogue import axis_label
from agentsim.metrics.summary import GAP_BUCKETS

#: Tail quantiles marked on latency CDFs and the labels used for them.
TAIL_QUANTILES = ((0.99, "p99"), (0.999, "p99.9"))

BREAKDOWN_PARTS = (("queue_wait_s", "queue wait"), ("load_wait_s", "load from lower tier"), ("prefill_s", "prefill (compute)"))


def _done(requests: pd.DataFrame, warmup_s: float) -> pd.DataFrame:
    """Measured requests, as the run summary counts them: arrived after warm-up, not rejected."""
    out = requests
    if "rejected" in out:
        out = out[~out.rejected.astype(bool)]
    if warmup_s > 0 and "arrival_s" in out:
        out = out[out.arrival_s >= warmup_s]
    return out


#: The reference columns (the proven upper bound, the Belady heuristic) and the hit-ratio columns
#: each may be drawn against (same units and mode): both are block-weighted cache-only replays of
#: the run's stream, like ``policy_replay_hit_ratio``.
BOUND_FOR = {"upper_bound_replay_hit_ratio": ("policy_replay_hit_ratio",),
             "belady_replay_hit_ratio": ("policy_replay_hit_ratio",)}
#: How each reference line is drawn: (legend label, line style, colour).
REFERENCE_LINES = {"upper_bound_replay_hit_ratio": ("upper bound (no policy exceeds it)", "--", "black"),
                   "belady_replay_hit_ratio": ("Belady heuristic (offline, not a bound)", ":", "0.45")}


def _fmt_s(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f} s"
    if value >= 1:
        return f"{value:.3g} s"
    return f"{value * 1e3:.3g} ms"


# --- latency ---------------------------------------------------------------------------------------

def latency_cdf(requests: pd.DataFrame, metrics: Sequence[str] = ("ttft_s", "e2e_s"), hue: str | None = None,
                warmup_s: float = 0.0, title: str | None = None) -> Figure:
    """Empirical CDF of each latency in ``metrics`` (one panel each), one curve per ``hue`` value.

    The x axis is logarithmic (latencies span decades); the y axis is a logit scale so that the
    tail is readable: 0.9, 0.99 and 0.999 are evenly spaced. Each curve's p99 and p99.9 are
    marked with a dot and a cross, and their values are given in the legend. Percentiles use
    numpy's linear interpolation over measured requests, as ``summary.json`` does.
    """
    needed = [m for m in metrics]
    _require(requests, needed, "latency CDF")
    done = _done(requests, warmup_s)
    if hue is not None and hue not in done:
        hue = None
    order = _hue_order(done, hue)
    palette = (hue_palette(done, hue) or dict(zip(order, sns.color_palette(n_colors=len(order))))) if order else None
    with _style():
        fig, axes = plt.subplots(1, len(metrics), figsize=(6.2 * len(metrics), 4.6), squeeze=False)
        for ax, metric in zip(axes[0], metrics):
            data = done[np.isfinite(done[metric].to_numpy(dtype=float)) & (done[metric] > 0)]
            if len(data) == 0:
                ax.text(0.5, 0.5, f"no finite positive {metric}", ha="center", transform=ax.transAxes)
                continue
            groups = [(None, data)] if hue is None else [(key, data[data[hue] == key]) for key in order]
            n_max = 1
            for key, group in groups:
                values = np.sort(group[metric].to_numpy(dtype=float))
                if len(values) == 0:
                    continue
                n_max = max(n_max, len(values))
                color = palette[key] if palette else sns.color_palette()[0]
                tails = [(name, float(np.percentile(values, q * 100))) for q, name in TAIL_QUANTILES]
                text = ", ".join(f"{name} {_fmt_s(v)}" for name, v in tails)
                name = f"{key}: {text}" if key is not None else text
                # Plotting position (i + 0.5) / n keeps the last point finite on the logit axis.
                ecdf = (np.arange(len(values)) + 0.5) / len(values)
                ax.step(values, ecdf, where="post", color=color, lw=1.6, label=f"{name} (n={len(values):,})")
                for (q, _), (_, v), marker in zip(TAIL_QUANTILES, tails, ("o", "X")):
                    ax.plot([v], [q], marker=marker, color=color, ms=7, mec="black", mew=0.6, zorder=5)
            ax.set_xscale("log")
            ax.set_yscale("logit")
            top = 1 - 0.5 / n_max
            ax.set_ylim(0.05, max(top, 0.999 + (1 - 0.999) / 2))
            ticks = [t for t in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999) if t <= ax.get_ylim()[1]]
            ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            for q, name in TAIL_QUANTILES:
                ax.axhline(q, color="0.4", ls=":", lw=0.9)
                ax.text(1.0, q, f" {name}", transform=ax.get_yaxis_transform(), va="center", fontsize=8, color="0.3")
            ax.set_xlabel(label(metric) + ", log scale")
            ax.set_ylabel("fraction of requests at most x (logit scale)")
            ax.set_title(f"CDF of {label(metric).split(' (')[0]}")
            # Below the axes: with several curves an inside legend would cover the tail.
            ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), title=hue, title_fontsize=8,
                      ncol=1 if len(groups) <= 4 else 2, frameon=False)
        fig.suptitle(title or "Latency distribution (dot: p99, cross: p99.9)", fontsize=12)
        fig.tight_layout()
    return fig


def slowest_requests(requests: pd.DataFrame, quantile: float = 0.999, min_requests: int = 20,
                     metric: str = "ttft_s", warmup_s: float = 0.0) -> pd.DataFrame:
    """Requests at or above the ``quantile`` of ``metric`` (at least ``min_requests`` of the
    slowest), slowest first, with ``other_s`` = TTFT - queue - load - prefill (0 when the
    breakdown is complete)."""
    done = _done(requests, warmup_s)
    done = done[np.isfinite(done[metric].to_numpy(dtype=float))]
    if len(done) == 0:
        return done
    threshold = float(np.percentile(done[metric].to_numpy(dtype=float), quantile * 100))
    slow = done[done[metric] >= threshold]
    if len(slow) < min_requests:
        slow = done.nlargest(min(min_requests, len(done)), metric)
    slow = slow.sort_values(metric, ascending=False, kind="stable").copy()
    parts = [c for c, _ in BREAKDOWN_PARTS if c in slow]
    slow["other_s"] = (slow[metric] - slow[parts].fillna(0.0).sum(axis=1)).clip(lower=0.0)
    return slow


def ttft_breakdown(requests: pd.DataFrame, quantile: float = 0.999, min_requests: int = 20, max_bars: int = 30,
                   warmup_s: float = 0.0, title: str | None = None) -> Figure:
    """Where the slowest requests' TTFT went: queue wait, load from a lower tier, prefill.

    Left: one stacked bar per slow request (TTFT >= the ``quantile``, at least ``min_requests``,
    at most ``max_bars`` shown, slowest on top), labelled with the request's gap kind, prompt
    tokens and the share recomputed. Right: the mean composition of TTFT for all requests, the
    p90-p99 band, the p99-``quantile`` band and the slow ones, so the cause of the tail stands
    out against the typical request. Runs written before the memory hierarchy existed have no
    load/prefill columns: their bars show queue wait and the rest as "service".
    """
    _require(requests, ["ttft_s", "queue_wait_s"], "TTFT breakdown")
    done = _done(requests, warmup_s)
    done = done[np.isfinite(done.ttft_s.to_numpy(dtype=float))]
    if len(done) == 0:
        raise PlotSkipped("TTFT breakdown: no finished requests")
    have_parts = all(c in done for c, _ in BREAKDOWN_PARTS)
    parts = list(BREAKDOWN_PARTS) if have_parts else [("queue_wait_s", "queue wait"), ("other_s", "service (load + prefill)")]
    slow = slowest_requests(done, quantile, min_requests)
    shown = slow.head(max_bars).iloc[::-1]
    colors = dict(zip([p for p, _ in parts] + ["other_s"], sns.color_palette("Set2", 4)))
    with _style():
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, max(4.0, 0.26 * len(shown) + 1.8)),
                                      gridspec_kw={"width_ratios": [2.3, 1]})
        left = np.zeros(len(shown))
        y = np.arange(len(shown))
        for column, name in parts:
            values = shown[column].fillna(0.0).to_numpy(dtype=float)
            ax.barh(y, values, left=left, color=colors[column], label=name, height=0.75)
            left += values
        if have_parts and shown["other_s"].sum() > 1e-9 * max(1.0, shown.ttft_s.sum()):
            ax.barh(y, shown.other_s.to_numpy(dtype=float), left=left, color=colors["other_s"], label="other", height=0.75)
        ticks = []
        # Every tier below HBM the table has a column for (the columns follow the tier kinds).
        lower_tiers = [c.removeprefix("hit_tokens_") for c in shown.columns
                       if c.startswith("hit_tokens_") and c != "hit_tokens_hbm"]
        for row in shown.itertuples():
            recomputed = row.recomputed_tokens / row.prompt_tokens if getattr(row, "prompt_tokens", 0) else float("nan")
            kind = getattr(row, "gap_kind", "?")
            depth = " sub" if getattr(row, "depth", 0) else ""
            lower = [(t, getattr(row, f"hit_tokens_{t}", 0)) for t in lower_tiers]
            lower = ", ".join(f"{t} {n / row.prompt_tokens:.0%}" for t, n in lower if n)
            ticks.append(f"#{row.request_id} {kind}{depth} {row.prompt_tokens / 1e3:.0f}K tok, {recomputed:.0%} recomp."
                         + (f", {lower}" if lower else ""))
        ax.set_yticks(y, ticks, fontsize=7)
        ax.set_xlabel("TTFT (s), split into its parts")
        ax.set_title(f"{len(slow)} slowest requests (TTFT >= p{quantile * 100:g}), {len(shown)} shown")
        ax.legend(fontsize=8, loc="lower right")
        # Mean composition by latency band.
        ttft = done.ttft_s.to_numpy(dtype=float)
        p90, p99, pq = (np.percentile(ttft, q) for q in (90, 99, quantile * 100))
        bands = [("all", done), ("p90-p99", done[(ttft >= p90) & (ttft < p99)]),
                 (f"p99-p{quantile * 100:g}", done[(ttft >= p99) & (ttft < pq)]), ("slowest", slow)]
        rows = []
        for name, band in bands:
            if len(band) == 0:
                continue
            if have_parts:
                values = {n: band[c].fillna(0.0).mean() for c, n in parts}
            else:
                values = {"queue wait": band.queue_wait_s.mean(), "service (load + prefill)": (band.ttft_s - band.queue_wait_s).mean()}
            rows.append({"band": f"{name}\n(n={len(band):,})", **values})
        comp = pd.DataFrame(rows).set_index("band")
        comp.plot.bar(stacked=True, ax=ax2, color=[colors[c] for c, _ in parts], legend=False, width=0.7)
        ax2.set_ylabel("mean TTFT (s)")
        ax2.set_xlabel("")
        ax2.tick_params(axis="x", labelrotation=0, labelsize=7.5)
        ax2.set_title("mean TTFT by latency band")
        if not have_parts:
            ax2.text(0.02, 0.97, "no load/prefill columns in this run", transform=ax2.transAxes, fontsize=8, va="top")
        fig.suptitle(title or "Why the slowest requests were slow: TTFT = queue + load + prefill", fontsize=12)
        fig.tight_layout()
    return fig


# --- cache ----------------------------------------------------------------------------------------

def hit_ratio_vs_capacity(table: pd.DataFrame, capacity: str = "kv_capacity_bytes", hit: str = "hit_ratio",
                          hue: str | None = "policy", bound: str | None = "upper_bound_replay_hit_ratio",
                          heuristic: str | None = "belady_replay_hit_ratio", capacity_scale: float = 1e9, capacity_label: str | None = None,
                          title: str | None = None) -> Figure:
    """Hit ratio against cache capacity, one line per ``hue`` (policy), with the upper bound.

    ``table`` has one row per run (a sweep's ``results.parquet``, or a cache-only replay table);
    several seeds per capacity give a 95% confidence band. ``bound`` is the column of the proven
    upper bound at each capacity (its mean is drawn dashed; :mod:`agentsim.cache.hit_bound`) and
    ``heuristic`` that of the Belady heuristic (dotted grey, not a bound); an absent
    or all-NaN column is left out and the figure says so. Both are drawn only against a hit
    ratio in their own units (:data:`BOUND_FOR`: cache-only block replays against
    ``policy_replay_hit_ratio``); against the timed token hit ratio the figure says why they are
    left out (a timed ``belady_oracle`` run is that chart's reference). The y axis is zoomed to the
    data; the x axis is logarithmic when the capacities span more than a factor 4. Policies have
    the same colour in every figure (:func:`policy_color`).
    """
    _require(table, [capacity, hit], "hit ratio vs capacity")
    data = table[np.isfinite(pd.to_numeric(table[hit], errors="coerce"))].copy()
    if len(data) == 0:
        raise PlotSkipped(f"hit ratio vs capacity: no finite {hit}")
    data["_x"] = pd.to_numeric(data[capacity]) / capacity_scale
    hue = hue if hue is not None and hue in data else None
    with _style():
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        sns.lineplot(data=data, x="_x", y=hit, hue=hue, hue_order=_hue_order(data, hue), style=hue, markers=True,
                     dashes=False, errorbar=("ci", 95), ax=ax, palette=hue_palette(data, hue))
        notes = []
        shown = list(pd.to_numeric(data[hit], errors="coerce"))
        references = [c for c in (bound, heuristic) if c]
        if any(hit not in BOUND_FOR.get(c, (hit,)) for c in references):
            notes.append(f"no {' or '.join(label(c).split(' (')[0] for c in references)} line: cache-only block "
                         f"hit ratios, not comparable with {hit}")
            references = []
        for column in references:
            name, style, colour = REFERENCE_LINES.get(column, (label(column), "--", "black"))
            if column in data and np.isfinite(pd.to_numeric(data[column], errors="coerce")).any():
                ref = data.assign(_b=pd.to_numeric(data[column], errors="coerce")).groupby("_x")._b.mean().dropna()
                ax.plot(ref.index, ref.to_numpy(), color=colour, ls=style, lw=1.6,
                        marker="*" if column == bound else None, ms=9, label=name)
                shown += list(ref.to_numpy())
            elif column == bound:
                notes.append("no upper bound in these results (tiered caches and very long streams skip it)")
        note = "; ".join(notes) or None
        xs = data["_x"].to_numpy(dtype=float)
        if xs.min() > 0 and xs.max() / xs.min() > 4:
            from matplotlib.ticker import FuncFormatter, NullFormatter

            ax.set_xscale("log")
            # ticks at the capacities run, labelled as numbers (not 4x10^0)
            ax.set_xticks(sorted(set(xs.tolist())))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(capacity_label or (label(capacity) if capacity_scale == 1e9 or axis_label(capacity) is None else capacity))
        ax.set_ylabel(label(hit))
        zoom_ratio_axis(ax, shown)
        ax.legend(fontsize=8, title=hue)
        if note:
            ax.text(0.01, 0.02, note, transform=ax.transAxes, fontsize=8, color="0.3")
        ax.set_title(title or "Hit ratio against cache capacity")
        fig.tight_layout()
    return fig


def gap_bucket(requests: pd.DataFrame) -> pd.Series:
    """The gap bucket of each request (``first_call`` for a session's first call), with the
    same edges as ``recomputed_tokens_by_gap`` in the summary, as an ordered categorical."""
    labels = ["first_call"] + [name for _, _, name in GAP_BUCKETS]
    out = pd.Series("first_call", index=requests.index, dtype=object)
    gaps = requests.gap_before_s.to_numpy(dtype=float)
    first = (requests.gap_kind == "first").to_numpy() if "gap_kind" in requests else ~np.isfinite(gaps)
    for low, high, name in GAP_BUCKETS:
        out[(gaps >= low) & (gaps < high) & ~first] = name
    return pd.Categorical(out, categories=labels, ordered=True)


GAP_LABELS = {"first_call": "first call", "lt_1s": "< 1 s", "1_10s": "1-10 s", "10_60s": "10-60 s",
              "1_5min": "1-5 min", "5_60min": "5-60 min", "gt_1h": "> 1 h"}


def recompute_by_gap(requests: pd.DataFrame, hue: str | None = None, warmup_s: float = 0.0,
                     title: str | None = None) -> Figure:
    """Recomputed prompt tokens by the gap (tool call, human turn) before the request.

    Left: millions of recomputed tokens per gap bucket; right: the token hit ratio of requests
    in each bucket. Under a TTL policy the 5-60 min bucket shows what the TTL cost; under
    capacity pressure the short buckets fill up too. One bar per ``hue`` value (e.g. policy)."""
    _require(requests, ["gap_before_s", "recomputed_tokens", "prompt_tokens", "hit_tokens"], "recompute by gap")
    done = _done(requests, warmup_s).copy()
    done["gap"] = gap_bucket(done)
    hue = hue if hue is not None and hue in done else None
    keys = ["gap"] + ([hue] if hue else [])
    agg = done.groupby(keys, observed=False).agg(recomputed=("recomputed_tokens", "sum"), prompt=("prompt_tokens", "sum"),
                                                 hit=("hit_tokens", "sum"), n=("prompt_tokens", "size")).reset_index()
    agg["recomputed_m"] = agg.recomputed / 1e6
    agg["hit_ratio"] = agg.hit / agg.prompt.where(agg.prompt > 0)
    agg["gap_label"] = agg.gap.map(GAP_LABELS).astype(str)
    order = [GAP_LABELS[c] for c in agg.gap.cat.categories if agg.loc[agg.gap == c, "n"].sum() > 0]
    agg = agg[agg.gap_label.isin(order)]
    with _style():
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
        sns.barplot(data=agg, x="gap_label", y="recomputed_m", hue=hue, order=order, hue_order=_hue_order(agg, hue), ax=ax,
                    color=None if hue else "C0", palette=hue_palette(agg, hue))
        ax.set_xlabel("gap before the request")
        ax.set_ylabel("recomputed prompt tokens (millions)")
        ax.set_title("recomputed tokens by preceding gap")
        counts = agg.groupby("gap_label").n.sum() if not hue else agg.groupby("gap_label").n.max()
        ax.set_xticks(range(len(order)), [f"{g}\n(n={int(counts.get(g, 0)):,})" for g in order], fontsize=8)
        sns.barplot(data=agg, x="gap_label", y="hit_ratio", hue=hue, order=order, hue_order=_hue_order(agg, hue), ax=ax2,
                    color=None if hue else "C2", palette=hue_palette(agg, hue))
        zoom_ratio_axis(ax2, agg.hit_ratio)
        ax2.set_xlabel("gap before the request")
        ax2.set_ylabel("hit ratio (tokens)")
        ax2.set_title("hit ratio by preceding gap")
        if hue:
            ax2.get_legend().remove() if ax2.get_legend() else None
            ax.legend(fontsize=8, title=hue)
        fig.suptitle(title or "Where recomputation comes from", fontsize=12)
        fig.tight_layout()
    return fig


def save_png(fig: Figure, path, dpi: int = 110) -> None:
    """Write ``fig`` as PNG and close it (reports make many figures)."""
    fig.savefig(path, dpi=dpi, format="png", bbox_inches="tight")
    plt.close(fig)


__all__ = [
    "PlotSkipped", "label", "latency_cdf", "slowest_requests", "ttft_breakdown", "hit_ratio_vs_capacity",
    "tier_occupancy", "evictions_over_time", "evictions_by_reason_bars", "link_utilisation", "gap_bucket",
    "recompute_by_gap", "cell_means", "cost_vs_sla", "metric_vs_axis", "save_png",
]
