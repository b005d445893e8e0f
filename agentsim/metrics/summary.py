"""Run-level summary metrics from the request table.

Conventions: percentiles are linear-interpolated (numpy default) over requests that arrived
after the warm-up and were served (not rejected); beside them ``requests_rejected`` and
``rejected_fraction`` (rejected / measured requests) say how many requests the latency
percentiles leave out, so a run that rejects its slowest requests cannot look fast unnoticed.
``hit_ratio`` is token-weighted: hit prompt tokens / prompt tokens of *every* measured request,
a rejected prompt counting as all misses (its tokens are in ``rejected_prompt_tokens``; the
cache never saw it, but the caller had to compute it elsewhere). SLA attainment counts a request
as met if TTFT <= slo.ttft_s and TPOT <= slo.tpot_s; rejected requests count as missed.
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


def recompute_by_gap(requests: pd.DataFrame) -> dict[str, int]:
    """Recomputed prompt tokens by the gap that preceded the request (first calls separately)."""
    out = {"first_call": int(requests.loc[requests.gap_kind == "first", "recomputed_tokens"].sum())}
    gaps = requests.gap_before_s.to_numpy(dtype=float)
    recomputed = requests.recomputed_tokens.to_numpy()
    for low, high, label in GAP_BUCKETS:
        mask = (gaps >= low) & (gaps < high)
        out[label] = int(recomputed[mask].sum())
    return out


def summarize_requests(requests: pd.DataFrame, warmup_s: float) -> dict:
    measured = requests[requests.arrival_s >= warmup_s]
    done = measured[~measured.rejected.astype(bool)]
    prompt = int(done.prompt_tokens.sum())
    hit = int(done.hit_tokens.sum())
    rejected = int(measured.rejected.sum())
    rejected_prompt = int(measured.prompt_tokens.sum()) - prompt
    summary = {
        "requests": int(len(requests)),
        "requests_measured": int(len(done)),
        "requests_rejected": rejected,
        "rejected_fraction": rejected / len(measured) if len(measured) else float("nan"),
        "prompt_tokens": prompt,
        "rejected_prompt_tokens": rejected_prompt,
        "output_tokens": int(done.output_tokens.sum()),
        "hit_tokens": hit,
        "recomputed_tokens": int(done.recomputed_tokens.sum()),
        # rejected prompts count as misses (see the module docstring)
        "hit_ratio": hit / (prompt + rejected_prompt) if prompt + rejected_prompt else float("nan"),
        "sla_attainment": float(measured.slo_met.mean()) if len(measured) else float("nan"),
    }
    summary.update(latency_summary(done))
    summary["recomputed_tokens_by_gap"] = recompute_by_gap(done)
    summary.update(computed_metrics(done))  # metrics registered with a compute function
    return summary
