"""Seaborn figures over a sweep's ``results.parquet`` (one row per cell and seed): per-cell means
with confidence intervals, cost against SLA attainment, metrics against a sweep axis. Shared by
``agentsim report`` and the notebooks (re-exported by :mod:`agentsim.plots`)."""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from agentsim.plot_style import PlotSkipped, _hue_order, _require, _style, hue_palette, label  # noqa: F401


def cell_means(table: pd.DataFrame, metrics: Sequence[str], by: Sequence[str] = ("label",)) -> pd.DataFrame:
    """Mean and 95% CI half-width (t, over seeds) of ``metrics`` per group of ``by``; ok runs only."""
    from agentsim.experiments.stats import mean_ci

    ok = table[table.status == "ok"] if "status" in table else table
    rows = []
    for key, group in ok.groupby(list(by), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        for metric in metrics:
            n, mean, _std, half = mean_ci(pd.to_numeric(group[metric], errors="coerce").to_numpy(dtype=float))
            row[metric], row[f"{metric}_ci"] = mean, half
        row["seeds"] = len(group)
        rows.append(row)
    return pd.DataFrame(rows)


def cost_vs_sla(table: pd.DataFrame, cost: str = "cost_per_million_tokens_usd", sla: str = "sla_attainment",
                hue: str | None = None, style: str | None = None, target: float | None = None,
                annotate: bool | None = None, title: str | None = None) -> Figure:
    """Cost against SLA attainment, one point per sweep cell (mean over seeds, large marker) with
    each seed's run as a small dot of the same colour (with few seeds a t-interval is wider than
    the data and would hide them).

    The good corner is bottom right (cheap and meeting the SLA). ``hue``/``style`` name axis
    columns of the sweep (e.g. ``cache.eviction.name``); ``target`` draws the attainment target.
    Points are annotated with the cell's ``label`` column when there are at most 12 cells."""
    _require(table, [cost, sla], "cost vs SLA attainment")
    by = ["label"] + [c for c in (hue, style) if c and c in table and c != "label"]
    if "label" not in table:
        table = table.assign(label=table.index.astype(str))
    means = cell_means(table, [cost, sla], by)
    means = means[np.isfinite(means[cost]) & np.isfinite(means[sla])]
    if len(means) == 0:
        raise PlotSkipped("cost vs SLA attainment: no cell has both metrics")
    hue = hue if hue in means else None
    style = style if style in means else None
    with _style():
        fig, ax = plt.subplots(figsize=(8, 5.2))
        ok = table[table.status == "ok"] if "status" in table else table
        seeds = ok.assign(**{sla: pd.to_numeric(ok[sla], errors="coerce"), cost: pd.to_numeric(ok[cost], errors="coerce")})
        order = _hue_order(means, hue)
        sns.scatterplot(data=seeds, x=sla, y=cost, hue=hue, hue_order=order, s=14, alpha=0.45, ax=ax, zorder=1,
                        legend=False, color=None if hue else "C0", palette=hue_palette(seeds, hue))
        sns.scatterplot(data=means, x=sla, y=cost, hue=hue, style=style, s=90, ax=ax, zorder=2, edgecolor="black",
                        hue_order=order, color=None if hue else "C0", palette=hue_palette(means, hue))
        low = float(np.nanmin(seeds[sla])) if len(seeds) else 0.0
        ax.set_xlim(max(-0.02, low - 0.05), 1.02)
        if annotate is None:
            annotate = len(means) <= 12
        if annotate:
            for row in means.itertuples():
                ax.annotate(str(row.label), (getattr(row, sla), getattr(row, cost)), fontsize=7, xytext=(4, 4),
                            textcoords="offset points", color="0.25")
        if target is not None:
            ax.axvline(target, color="C3", ls="--", lw=1, label=f"target {target:g}")
        ax.set_xlabel(label(sla))
        ax.set_ylabel(label(cost))
        ax.set_title(title or "Cost against SLA attainment per sweep cell (bottom right is better)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def metric_vs_axis(table: pd.DataFrame, x: str, metrics: Sequence[str], hue: str | None = None,
                   x_scale: float = 1.0, x_label: str | None = None, thresholds: dict[str, float] | None = None,
                   logx: bool | None = None, title: str | None = None) -> Figure:
    """One panel per metric against a sweep axis ``x`` (mean over seeds with 95% CI), one line
    per ``hue``; ``thresholds`` draws an SLO line on a metric's panel (e.g. ``{"ttft_p99_s": 2}``)."""
    _require(table, [x, *metrics], "metric vs axis")
    ok = table[table.status == "ok"] if "status" in table else table
    data = ok.assign(_x=pd.to_numeric(ok[x], errors="coerce") / x_scale)
    hue = hue if hue is not None and hue in data else None
    with _style():
        fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 4.0), squeeze=False)
        for i, (ax, metric) in enumerate(zip(axes[0], metrics)):
            sns.lineplot(data=data, x="_x", y=metric, hue=hue, hue_order=_hue_order(data, hue), marker="o",
                         errorbar=("ci", 95), ax=ax, legend=i == 0, palette=hue_palette(data, hue))
            if thresholds and metric in thresholds:
                ax.axhline(thresholds[metric], color="C3", ls="--", lw=1, label=f"SLO {thresholds[metric]:g}")
                ax.legend(fontsize=7)
            xs = data._x.to_numpy(dtype=float)
            if (logx is True) or (logx is None and np.nanmin(xs) > 0 and np.nanmax(xs) / np.nanmin(xs) > 8):
                ax.set_xscale("log")
            ax.set_xlabel(x_label or label(x))
            ax.set_ylabel(label(metric))
            ax.set_title(label(metric).split(" (")[0], fontsize=10)
        fig.suptitle(title or f"Metrics against {x_label or label(x)}", fontsize=12)
        fig.tight_layout()
    return fig


