"""Figure conventions shared by every plot: one colour per policy name, ratio axes zoomed to the data."""

from __future__ import annotations

import zlib
from typing import Iterable

import numpy as np
import pandas as pd
import seaborn as sns

from agentsim.metrics.catalogue import axis_label

#: One colour per policy name in every figure, whichever policies a figure shows: a fixed table
#: (families get neighbouring hues; the offline optima are black and grey) rather than colours
#: assigned in order of appearance, which change when a figure leaves a policy out.
POLICY_COLORS: dict[str, str] = dict(zip(
    ["lru", "fifo", "sieve", "s3fifo", "arc", "lfu", "gdsf", "slru", "twoq", "w_tinylfu", "vllm_lru", "tlru",
     "ttl_5m", "ttl_1h", "ttl_expiry", "ttl_pin", "continuum", "kvflow", "infercept"],
    ["#1f77b4", "#aec7e8", "#9edae5", "#17becf", "#2ca02c", "#98df8a", "#bcbd22", "#dbdb8d", "#8c564b",
     "#c49c94", "#7f7f7f", "#c7c7c7", "#ff7f0e", "#ffbb78", "#e377c2", "#d62728", "#ff9896", "#9467bd",
     "#c5b0d5"]))
POLICY_COLORS.update({"belady_oracle": "#404040", "belady": "#000000"})
#: Colours for names outside the table, chosen by a stable hash of the name.
_SPARE_COLORS = ["#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#8ca252", "#bd9e39",
                 "#ad494a", "#a55194"]
#: Columns whose values are eviction policy names.
POLICY_COLUMNS = ("policy", "cache.eviction", "cache.eviction.name")


def policy_color(name: str) -> str:
    """The colour of policy ``name`` in every figure (see :data:`POLICY_COLORS`)."""
    return POLICY_COLORS.get(str(name)) or _SPARE_COLORS[zlib.crc32(str(name).encode()) % len(_SPARE_COLORS)]


def hue_palette(frame: pd.DataFrame, hue: str | None) -> dict | None:
    """Fixed policy colours when ``hue`` holds policy names; None (seaborn's cycle) otherwise."""
    if hue is None or hue not in POLICY_COLUMNS or hue not in frame:
        return None
    return {value: policy_color(value) for value in frame[hue].unique()}


def zoom_ratio_axis(ax, values, floor: float = 0.0, ceiling: float = 1.0) -> None:
    """Limit a ratio axis to the data (with a margin) instead of 0-1, so 0.93 and 0.94 stay apart."""
    values = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if len(values) == 0:
        ax.set_ylim(floor, ceiling)
        return
    low, high = float(values.min()), float(values.max())
    margin = max((high - low) * 0.15, 0.005)
    ax.set_ylim(max(floor, low - margin), min(ceiling + 0.002, high + margin))




class PlotSkipped(Exception):
    """The data a figure needs are absent; ``str(exc)`` says what is missing and why."""


def label(column: str) -> str:
    """Readable axis label for a column name (its catalogue ``axis_label``; else the name itself,
    de-underscored)."""
    return axis_label(column) or column.replace("_", " ")


def _style():
    return sns.axes_style("whitegrid")


def _require(frame: pd.DataFrame | None, columns: Iterable[str], what: str) -> pd.DataFrame:
    if frame is None or len(frame) == 0:
        raise PlotSkipped(f"{what}: no rows")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise PlotSkipped(f"{what}: the table has no column {', '.join(missing)} (written by an older agentsim?)")
    return frame


def _hue_order(frame: pd.DataFrame, hue: str | None) -> list | None:
    if hue is None:
        return None
    return list(dict.fromkeys(frame[hue].tolist()))  # first appearance: the sweep's cell order
