"""Run-level summary metrics from the request table.

Conventions: percentiles are linear-interpolated (numpy default) over requests that arrived
after the warm-up and were served (not rejected); beside them ``requests_rejected`` and
``rejected_fraction`` (rejected / measured requests) say how many requests the latency
percentiles leave out, so a run that rejects its slowest requests cannot look fast unnoticed;
``requests_rejected_by_reason`` splits them by the requests' ``reject_reason``.
``hit_ratio`` is token-weighted: hit prompt tokens / prompt tokens of *every* measured request,
a rejected prompt counting as all misses (its tokens are in ``rejected_prompt_tokens``; the
cache never saw it, but the caller had to compute it elsewhere). SLA attainment counts a request
as met if TTFT <= slo.ttft_s and TPOT <= slo.tpot_s; rejected requests count as missed.

Rates (``requests_per_s``, ``output_tokens_per_s``, ``goodput_requests_per_s``) divide by the
measured window: from the end of the warm-up to the end of the run (the last finished request).
Goodput counts the measured requests that met the SLO (the same test as SLA attainment).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from agentsim.metrics.catalogue import computed_metrics

PERCENTILES = {"p50": 50, "p90": 90, "p99": 99, "p999": 99.9}

GAP_BUCKETS = [(0, 1, "lt_1s"), (1, 10, "1_10s"), (10, 60, "10_60s"), (60, 300, "1_5min"),
               (300, 3600, "5_60min"), (3600, math.inf, "gt_1h")]


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def latency_summary(done: pd.DataFrame) -> dict:
    out: dict[str, float] = {}
    for metric in ("ttft", "tpot", "e2e", "queue_wait"):
        values = done[f"{metric}_s"].to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        for name, q in PERCENTILES.items():
            out[f"{metric}_{name}_s"] = _pct(values, q)
        out[f"{metric}_mean_s"] = float(values.mean()) if len(values) else float("nan")
        out[f"{metric}_max_s"] = float(values.max()) if len(values) else float("nan")
    return out


def ttft_part_summary(done: pd.DataFrame, parts) -> dict:
    """``ttft_<part>_mean_s`` and ``ttft_<part>_p99_s`` per name in ``parts``, over the finite
    values of ``done``'s ``<part>_s`` column (NaN where there are none): TTFT's parts as the
    tiers and the disaggregated pools break it down."""
    out: dict[str, float] = {}
    for part in parts:
        values = done[f"{part}_s"].to_numpy(dtype=float) if len(done) else np.array([])
        values = values[np.isfinite(values)]
        out[f"ttft_{part}_mean_s"] = float(values.mean()) if len(values) else float("nan")
        out[f"ttft_{part}_p99_s"] = _pct(values, 99)
    return out


#: Causes of time spent waiting before the first token, in display order: no batch slot, no KV
#: memory, held by its own load from a lower tier, the iteration in progress (all in the waiting
#: queue, :mod:`agentsim.cluster.serving.queue_causes`), then, once admitted, the prefill chunk
#: budget (waiting for its first chunk).
QUEUE_CAUSES = ("slot", "kv", "load", "step", "chunk")


def queue_cause_summary(done: pd.DataFrame) -> dict:
    """Mean seconds per request waiting for each cause (``queue_<cause>_mean_s``), waiting in
    the queue again after preemptions (``requeue_wait_mean_s``, not part of the queue wait), the total
    seconds by cause (``queue_wait_by_cause_s``) and each cause's share of the total
    (``queue_wait_share_by_cause``; NaN shares when nothing waited)."""
    out: dict = {}
    totals: dict[str, float] = {}
    for cause in QUEUE_CAUSES:
        column = f"queue_{cause}_s"
        values = done[column].to_numpy(dtype=float) if column in done else np.zeros(0)
        values = values[np.isfinite(values)]
        out[f"queue_{cause}_mean_s"] = float(values.sum() / len(done)) if len(done) else float("nan")
        totals[cause] = float(values.sum())
    grand = sum(totals.values())
    requeue = done["requeue_wait_s"].to_numpy(dtype=float) if "requeue_wait_s" in done else np.zeros(0)
    out["requeue_wait_mean_s"] = float(requeue.sum() / len(done)) if len(done) else float("nan")
    out["queue_wait_by_cause_s"] = totals
    out["queue_wait_share_by_cause"] = {c: (t / grand if grand > 0 else float("nan")) for c, t in totals.items()}
    return out


def rate_summary(done: pd.DataFrame, window_s: float) -> dict:
    """Throughput and goodput of the finished requests over ``window_s`` seconds (NaN for an
    empty window)."""
    if not window_s > 0:
        return {"requests_per_s": float("nan"), "output_tokens_per_s": float("nan"),
                "goodput_requests_per_s": float("nan")}
    return {"requests_per_s": len(done) / window_s,
            "output_tokens_per_s": float(done.output_tokens.sum()) / window_s,
            "goodput_requests_per_s": float(done.slo_met.astype(bool).sum()) / window_s}


#: Figures given for each agent class of a mixed workload (``by_agent_class``).
CLASS_METRICS = ("requests_measured", "hit_ratio", "recomputed_tokens", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s",
                 "e2e_p99_s", "sla_attainment", "requests_per_s", "goodput_requests_per_s")


def recompute_by_gap(requests: pd.DataFrame) -> dict[str, int]:
    """Recomputed prompt tokens by the gap that preceded the request (first calls separately)."""
    out = {"first_call": int(requests.loc[requests.gap_kind == "first", "recomputed_tokens"].sum())}
    gaps = requests.gap_before_s.to_numpy(dtype=float)
    recomputed = requests.recomputed_tokens.to_numpy()
    for low, high, label in GAP_BUCKETS:
        mask = (gaps >= low) & (gaps < high)
        out[label] = int(recomputed[mask].sum())
    return out


def summarize_requests(requests: pd.DataFrame, warmup_s: float, end_s: float | None = None) -> dict:
    """The run-level request metrics (see the module docstring). ``end_s``: the end of the run
    (default: the last request's finish), which closes the window the rates divide by. Adds
    ``by_agent_class`` (:data:`CLASS_METRICS` of each class) when the run has more than one."""
    summary = _summarize(requests, warmup_s, end_s)
    classes = sorted(requests.agent_class.unique()) if len(requests) else []
    if len(classes) > 1:
        summary["by_agent_class"] = {
            name: {key: _summarize(requests[requests.agent_class == name], warmup_s,
                                   summary["measured_window_s"] + warmup_s)[key] for key in CLASS_METRICS}
            for name in classes}
    return summary


def _rejected_by_reason(measured: pd.DataFrame) -> dict[str, int]:
    """Measured rejected requests by ``reject_reason`` (tables without the column: one "" reason)."""
    rejected = measured[measured.rejected.astype(bool)]
    if "reject_reason" not in rejected:
        return {"": int(len(rejected))} if len(rejected) else {}
    return {str(reason): int(count) for reason, count in sorted(rejected.reject_reason.value_counts().items())}


def rows_where(frame: pd.DataFrame, mask) -> pd.DataFrame:
    """``frame[mask]``, or ``frame`` itself when the mask keeps every row: a boolean selection
    copies every column, and with no warm-up and no rejections the summaries' selections of a
    long run's request table kept three copies of it alive at once. For reading only."""
    mask = np.asarray(mask, dtype=bool)
    return frame if mask.all() else frame[mask]


def _summarize(requests: pd.DataFrame, warmup_s: float, end_s: float | None) -> dict:
    measured = rows_where(requests, requests.arrival_s >= warmup_s)
    done = rows_where(measured, ~measured.rejected.astype(bool))
    if end_s is None:
        finish = requests.finish_s.to_numpy(dtype=float)
        finish = finish[np.isfinite(finish)]
        end_s = float(finish.max()) if len(finish) else warmup_s
    window_s = max(0.0, end_s - warmup_s)
    prompt = int(done.prompt_tokens.sum())
    hit = int(done.hit_tokens.sum())
    rejected = int(measured.rejected.sum())
    rejected_prompt = int(measured.prompt_tokens.sum()) - prompt
    summary = {
        "requests": int(len(requests)),
        "requests_measured": int(len(done)),
        "requests_rejected": rejected,
        "rejected_fraction": rejected / len(measured) if len(measured) else float("nan"),
        "requests_rejected_by_reason": _rejected_by_reason(measured),
        "prompt_tokens": prompt,
        "rejected_prompt_tokens": rejected_prompt,
        "output_tokens": int(done.output_tokens.sum()),
        "hit_tokens": hit,
        "recomputed_tokens": int(done.recomputed_tokens.sum()),
        # Its split by cause (agentsim.engine.recompute); the three sum to recomputed_tokens.
        "recomputed_tokens_cold": int(done.recomputed_cold_tokens.sum()),
        "recomputed_tokens_evicted": int(done.recomputed_evicted_tokens.sum()),
        "recomputed_tokens_invalidated": int(done.recomputed_invalidated_tokens.sum()),
        # rejected prompts count as misses (see the module docstring)
        "hit_ratio": hit / (prompt + rejected_prompt) if prompt + rejected_prompt else float("nan"),
        "sla_attainment": float(measured.slo_met.mean()) if len(measured) else float("nan"),
    }
    summary.update(latency_summary(done))
    summary["measured_window_s"] = window_s
    summary.update(rate_summary(done, window_s))
    summary.update(queue_cause_summary(done))
    summary["recomputed_tokens_by_gap"] = recompute_by_gap(done)
    summary.update(computed_metrics(done))  # metrics registered with a compute function
    return summary
