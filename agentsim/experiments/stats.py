"""Statistics across seeds: mean and t-distribution confidence intervals, paired differences.

With ``n`` seeds a metric's interval is ``mean +- t(1 - alpha/2, n - 1) * s / sqrt(n)`` (sample
standard deviation ``s``); with one seed the half-width is NaN (no spread to estimate).
Paired differences use only seeds present (and finite) in both the cell and its baseline:
because every cell sees the same workload for a seed (common random numbers), the per-seed
differences have much less variance than the two cells' own spreads, so small effects become
visible with few seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats


def mean_ci(values, confidence: float = 0.95) -> tuple[int, float, float, float]:
    """(n, mean, sample std, CI half-width) of the finite values."""
    array = np.asarray(values, dtype=float)
    array = array[np.isfinite(array)]
    n = len(array)
    if n == 0:
        return 0, math.nan, math.nan, math.nan
    mean = float(array.mean())
    if n == 1:
        return 1, mean, math.nan, math.nan
    std = float(array.std(ddof=1))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1) * std / math.sqrt(n))
    return n, mean, std, half


def numeric_metrics(table: pd.DataFrame, exclude: set[str]) -> list[str]:
    """Columns of the combined table that are numeric metrics (not bookkeeping)."""
    out = []
    for column in table.columns:
        if column in exclude:
            continue
        if pd.api.types.is_bool_dtype(table[column]) or pd.api.types.is_numeric_dtype(table[column]):
            out.append(column)
    return out


def cell_statistics(table: pd.DataFrame, metrics: list[str], confidence: float = 0.95) -> pd.DataFrame:
    """Long form: one row per (cell, metric) with n, mean, std, ci_low, ci_high over seeds.

    ``table`` is the combined table (one row per cell and seed, ``status`` column); failed runs are left out.
    """
    ok = table[table.status == "ok"]
    rows = []
    for (cell_index, cell_id, label), group in ok.groupby(["cell_index", "cell_id", "label"], sort=True):
        for metric in metrics:
            if metric not in group:
                continue
            n, mean, std, half = mean_ci(group[metric].astype(float), confidence)
            rows.append({"cell_index": cell_index, "cell_id": cell_id, "label": label, "metric": metric, "n": n,
                         "mean": mean, "std": std, "ci_half_width": half, "ci_low": mean - half, "ci_high": mean + half})
    return pd.DataFrame(rows, columns=["cell_index", "cell_id", "label", "metric", "n", "mean", "std",
                                       "ci_half_width", "ci_low", "ci_high"])


def paired_differences(table: pd.DataFrame, baselines: dict[int, int], metrics: list[str],
                       confidence: float = 0.95) -> pd.DataFrame:
    """One row per (cell, metric): mean of (cell - baseline) over shared seeds with its CI.

    ``baselines`` maps a cell index to its baseline cell's index. ``relative_diff`` is the mean
    difference over the baseline's mean on the same seeds.
    """
    ok = table[table.status == "ok"]
    by_cell = {index: group.set_index("seed") for index, group in ok.groupby("cell_index")}
    rows = []
    for cell_index, base_index in sorted(baselines.items()):
        cell, base = by_cell.get(cell_index), by_cell.get(base_index)
        if cell is None or base is None:
            continue
        seeds = sorted(set(cell.index) & set(base.index))
        for metric in metrics:
            if metric not in cell or metric not in base:
                continue
            a = cell.loc[seeds, metric].astype(float).to_numpy()
            b = base.loc[seeds, metric].astype(float).to_numpy()
            mask = np.isfinite(a) & np.isfinite(b)
            n, mean, std, half = mean_ci(a[mask] - b[mask], confidence)
            base_mean = float(b[mask].mean()) if mask.any() else math.nan
            rows.append({"cell_index": cell_index, "label": cell["label"].iloc[0], "baseline_index": base_index,
                         "baseline_label": base["label"].iloc[0], "metric": metric, "n_pairs": n,
                         "mean_diff": mean, "std_diff": std, "ci_low": mean - half, "ci_high": mean + half,
                         "baseline_mean": base_mean,
                         "relative_diff": mean / base_mean if base_mean not in (0.0,) and math.isfinite(base_mean) else math.nan,
                         "significant": bool(n > 1 and math.isfinite(half) and (mean - half > 0 or mean + half < 0))})
    return pd.DataFrame(rows, columns=["cell_index", "label", "baseline_index", "baseline_label", "metric", "n_pairs",
                                       "mean_diff", "std_diff", "ci_low", "ci_high", "baseline_mean",
                                       "relative_diff", "significant"])


def cell_regimes(table: pd.DataFrame, column: str = "regime") -> dict[int, str]:
    """Each cell's eviction regime over its finished seeds: the label if all seeds agree
    (``capacity_bound``), else each label with its count (``capacity_bound 2, no_eviction 1``).
    Cells without the column (or without finished runs) are left out."""
    if column not in table or "status" not in table:
        return {}
    ok = table[(table.status == "ok") & table[column].notna()]
    out: dict[int, str] = {}
    for cell_index, group in ok.groupby("cell_index", sort=True):
        counts = group[column].astype(str).value_counts(sort=False).sort_index()
        out[int(cell_index)] = counts.index[0] if len(counts) == 1 else ", ".join(f"{k} {v}" for k, v in counts.items())
    return out
