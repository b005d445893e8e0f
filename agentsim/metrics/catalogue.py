"""One catalogue of run-level metric names, labels and units, read by every place that shows them.

The CLI summary table (:func:`agentsim.commands.common.summary_table`), the HTML report
(:mod:`agentsim.report`: its summary table and the sweep's key metrics) and the figures
(:func:`agentsim.plots.label`) all look metrics up here, so a metric's label is written once.

A :class:`Metric` is a ``summary.json`` key (or a request-table column) with its readable label
and unit; ``axis_label`` is the longer wording a figure's axis uses where the table label would
be ambiguous (e.g. a timed run's token hit ratio next to a replay's block hit ratio). A metric
may carry ``compute``, a function of the measured, finished requests (a DataFrame of
:class:`~agentsim.metrics.records.RequestRecord` rows): :func:`computed_metrics` evaluates every
such metric for the run summary, so a new request-level metric is one :func:`register` call
(see docs/design.md, "Where does X go").

Order matters: the CLI and report tables list metrics in registration order within their table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

if TYPE_CHECKING:  # annotations only: the command line imports this module for its table rows,
    import pandas as pd  # and ``agentsim --help`` must not pay for numpy and pandas

#: Where a metric is listed: the main summary table, the memory-hierarchy rows, or neither.
Table = Literal["summary", "hierarchy"]


@dataclass(frozen=True)
class Metric:
    """A run-level metric: ``key`` in ``summary.json``, its label and unit (``"s"``, ``"tokens"``,
    ``"blocks"``, ``"bytes"``, ``"fraction"``, ``"USD"``, ``"count"``, rates ``"1/s"`` and
    ``"tokens/s"``, or ``""`` for labels)."""

    key: str
    label: str
    unit: str
    table: Table | None = None
    key_metric: bool = False          # compared across a sweep's cells in the report
    axis_label: str | None = None     # a figure's axis label, where it differs from ``label``
    compute: Callable[[pd.DataFrame], Any] | None = None


#: Every metric by key, in registration order.
CATALOGUE: dict[str, Metric] = {}
#: The report's key metrics, in the order its sweep table shows them (built-ins first, then
#: registered metrics with ``key_metric=True``).
KEY_METRICS: list[str] = []


def register(metric: Metric) -> Metric:
    """Add ``metric`` (its key must be new); returns it."""
    if metric.key in CATALOGUE:
        raise ValueError(f"metric {metric.key!r} registered twice")
    CATALOGUE[metric.key] = metric
    if metric.key_metric:
        KEY_METRICS.append(metric.key)
    return metric


def unregister(key: str) -> None:
    """Remove a metric (for tests that register a throw-away one)."""
    CATALOGUE.pop(key, None)
    if key in KEY_METRICS:
        KEY_METRICS.remove(key)


def table_rows(table: Table) -> list[tuple[str, str]]:
    """(key, label) of every metric listed in ``table``, in registration order."""
    return [(m.key, m.label) for m in CATALOGUE.values() if m.table == table]


def axis_label(key: str) -> str | None:
    """A figure's label for ``key``: its ``axis_label``, else None (the caller falls back)."""
    metric = CATALOGUE.get(key)
    return metric.axis_label if metric is not None else None


def computed_metrics(done: pd.DataFrame) -> dict[str, Any]:
    """Every metric that has a ``compute`` function, evaluated on the finished requests."""
    return {m.key: m.compute(done) for m in CATALOGUE.values() if m.compute is not None}


#: Eviction reasons in the order figures and tables list them (a record's ``reason`` field).
EVICTION_REASONS = ("capacity", "ttl_expiry", "pin_timeout", "pressure_unpin", "mutation", "admission")


def format_value(value: Any, unit: str = "") -> str:
    """``value`` as a person reads it: seconds below 1 s in ms (``45.5 ms``), above a minute
    in min or h; bytes in GB/TB; counts with thousands separators; NaN as ``-``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and value != value:
        return "-"
    if unit == "s":
        magnitude = abs(value)
        if magnitude == 0:
            return "0 s"
        if magnitude < 1:
            return f"{value * 1e3:.3g} ms"
        if magnitude < 120:
            return f"{value:.3g} s"
        if magnitude < 7200:
            return f"{value / 60:.3g} min"
        return f"{value / 3600:.3g} h"
    if unit == "bytes":
        return f"{value / 1e12:.3g} TB" if abs(value) >= 1e12 else f"{value / 1e9:.3g} GB"
    if unit in ("1/s", "tokens/s"):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000 or value == int(value):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"
    return f"{value:.4g}"


def display_label(key: str, label: str) -> str:
    """A table's label for ``key`` when its value is shown by :func:`format_value`: seconds
    carry their unit in the value, so the label drops its ``(s)``."""
    metric = CATALOGUE.get(key)
    if metric is not None and metric.unit == "s" and label.endswith(" (s)"):
        return label[: -len(" (s)")]
    return label


def unit_of(key: str) -> str:
    """The unit of a catalogued metric (``""`` for an unknown key)."""
    metric = CATALOGUE.get(key)
    return metric.unit if metric is not None else ""


def _builtin(key: str, label: str, unit: str, table: Table | None = "summary", axis: str | None = None) -> None:
    register(Metric(key, label, unit, table=table, axis_label=axis))


# The main summary table (CLI and report), in display order.
_builtin("requests", "requests", "count")
_builtin("sessions", "sessions", "count")
_builtin("hit_ratio", "hit ratio (tokens)", "fraction", axis="hit ratio (tokens, timed run)")
_builtin("recomputed_tokens", "recomputed tokens", "tokens")
_builtin("recomputed_tokens_cold", "  of which cold (never cached here)", "tokens")
_builtin("recomputed_tokens_evicted", "  of which lost to eviction/TTL", "tokens")
_builtin("recomputed_tokens_invalidated", "  of which invalidated (history rewrite)", "tokens")
_builtin("ttft_p50_s", "TTFT p50 (s)", "s")
_builtin("ttft_p90_s", "TTFT p90 (s)", "s")
_builtin("ttft_p99_s", "TTFT p99 (s)", "s", axis="TTFT p99 (s)")
_builtin("ttft_p999_s", "TTFT p99.9 (s)", "s", axis="TTFT p99.9 (s)")
_builtin("ttft_max_s", "TTFT max (s)", "s")
_builtin("tpot_p50_s", "TPOT p50 (s)", "s")
_builtin("tpot_p99_s", "TPOT p99 (s)", "s")
_builtin("e2e_p99_s", "E2E p99 (s)", "s")
_builtin("requests_per_s", "throughput (requests/s)", "1/s", axis="throughput (requests/s)")
_builtin("output_tokens_per_s", "throughput (output tokens/s)", "tokens/s", axis="output tokens/s")
_builtin("goodput_requests_per_s", "goodput (requests/s within the SLO)", "1/s",
         axis="goodput (requests/s meeting the SLO)")
# Time before the first token by cause (mean per request; agentsim/cluster/serving/queue_causes.py).
_builtin("queue_wait_mean_s", "queue wait mean (s)", "s")
_builtin("queue_slot_mean_s", "  waiting for a batch slot (s)", "s")
_builtin("queue_kv_mean_s", "  waiting for KV memory (s)", "s")
_builtin("queue_load_mean_s", "  held by its load from a lower tier (s)", "s")
_builtin("queue_step_mean_s", "  waiting for the running iteration (s)", "s")
_builtin("queue_chunk_mean_s", "first prefill chunk wait mean (s)", "s")
_builtin("requeue_wait_mean_s", "queue wait again after preemption mean (s)", "s")
_builtin("sla_attainment", "SLA attainment", "fraction", axis="SLA attainment (fraction of requests)")
_builtin("evicted_blocks", "evicted blocks", "blocks")
_builtin("gpu_busy_fraction", "GPU busy fraction", "fraction")
_builtin("simulated_s", "simulated (s)", "s")
_builtin("wall_s", "wall (s)", "s")
# Diagnostics (agentsim/engine/diagnostics.py): why the cache result is what it is.
_builtin("regime", "regime", "")
_builtin("characteristic_eviction_time_s", "T_C: median idle age at eviction (s)", "s")
_builtin("ttl_s", "policy TTL (s)", "s")
_builtin("ttl_tier", "TTL applies to tier", "")
_builtin("ttl_tier_characteristic_eviction_time_s", "T_C of the TTL's tier (s)", "s")
_builtin("ttl_margin_s", "TTL margin: TTL - its tier's T_C (s)", "s")
_builtin("ttl_expirations_blocks", "TTL expirations (blocks)", "blocks")
_builtin("pins_created", "TTL-pins created", "count")
_builtin("pins_honored", "TTL-pins honoured", "count")
_builtin("pins_timed_out", "TTL-pins timed out", "count")
_builtin("pins_broken_by_pressure", "TTL-pins broken by pressure", "count")
_builtin("upper_bound_replay_hit_ratio", "upper bound hit ratio (replay, blocks)", "fraction",
         axis="upper bound on any policy's hit ratio (blocks, replay)")
_builtin("belady_replay_hit_ratio", "Belady heuristic hit ratio (replay, blocks)", "fraction",
         axis="Belady heuristic hit ratio (blocks, replay)")
_builtin("policy_replay_hit_ratio", "policy hit ratio (replay, blocks)", "fraction",
         axis="hit ratio (blocks, cache-only replay of the run's stream)")
_builtin("upper_bound_headroom", "headroom to the upper bound", "fraction")
_builtin("belady_headroom", "Belady heuristic minus policy (not a bound)", "fraction")
# Engine-style KV admission (docs/serving.md): preemptions and why requests waited.
_builtin("kv_admission", "KV admission rule", "")
_builtin("preemptions", "preemptions", "count")
_builtin("recompute_preemptions", "preemptions by recompute", "count")
_builtin("swap_preemptions", "preemptions by swap to DRAM", "count")
_builtin("swapped_out_blocks", "blocks swapped out", "blocks")
_builtin("swapped_in_blocks", "blocks swapped back in", "blocks")
_builtin("retractions", "retractions (sglang)", "count")


def _column_sum(column: str) -> Callable[[pd.DataFrame], int]:
    return lambda done: int(done[column].sum()) if len(done) else 0


register(Metric("preempted_recompute_tokens", "tokens recomputed after preemption", "tokens", table="summary",
                compute=_column_sum("preempted_recompute_tokens")))
# Prefill-ahead of tool output (agentsim/engine/prefill_ahead.py; present when it is on): what
# it costs. What it buys is the TTFT above, compared with a run without it on the same seed.
_builtin("prefill_ahead_tokens", "tokens prefilled ahead of calls", "tokens")
_builtin("prefill_ahead_gpu_s", "prefill-ahead GPU time (GPU-s)", "s")
_builtin("prefill_ahead_wasted_gpu_s", "prefill-ahead GPU time whose call never came (GPU-s)", "s")
_builtin("prefill_ahead_pinned_blocks_mean", "KV pinned by prefill-ahead (mean blocks)", "blocks")
# Memory-hierarchy rows (present when cache.tiers is enabled): TTFT = queue + load + prefill.
_builtin("ttft_queue_wait_mean_s", "TTFT queue mean (s)", "s", table="hierarchy")
_builtin("ttft_load_wait_mean_s", "TTFT load mean (s)", "s", table="hierarchy")
_builtin("ttft_prefill_mean_s", "TTFT prefill mean (s)", "s", table="hierarchy")
_builtin("ttft_load_wait_p99_s", "TTFT load p99 (s)", "s", table="hierarchy")
# Disaggregated serving rows (present with serving.disaggregation):
# TTFT = prefill queue + prefill + decode queue + KV transfer + first decode step.
_builtin("prefill_workers", "prefill workers", "count", table="hierarchy")
_builtin("decode_workers", "decode workers", "count", table="hierarchy")
_builtin("prefill_busy_fraction", "prefill GPU busy fraction", "fraction", table="hierarchy")
_builtin("prefill_busiest_share", "busiest prefill worker (fair shares)", "", table="hierarchy")
_builtin("ttft_decode_queue_mean_s", "TTFT decode queue mean (s)", "s", table="hierarchy")
_builtin("ttft_kv_transfer_mean_s", "TTFT KV transfer mean (s)", "s", table="hierarchy")
_builtin("ttft_kv_transfer_p99_s", "TTFT KV transfer p99 (s)", "s", table="hierarchy")
_builtin("ttft_decode_first_step_mean_s", "TTFT first decode step mean (s)", "s", table="hierarchy")
_builtin("racks", "racks", "count", table="hierarchy")
_builtin("kv_transfer_bytes", "KV handed over (bytes)", "bytes", table="hierarchy")
_builtin("decode_queue_s", "decode queue wait (s)", "s", table=None, axis="decode queue wait (s)")
_builtin("kv_transfer_s", "KV transfer (s)", "s", table=None, axis="KV transfer time (s)")
_builtin("decode_first_step_s", "decode worker's first step (s)", "s", table=None,
         axis="decode worker's first step (s)")
# Economics and request-table columns shown on figures' axes.
_builtin("cost_per_million_tokens_usd", "cost per million tokens (USD)", "USD", table=None,
         axis="GPU cost per million tokens (USD)")
_builtin("provider_bill_usd", "provider bill (USD)", "USD", table=None, axis="provider-style bill (USD)")
_builtin("cost_usd_per_hour", "deployment cost per hour (USD)", "USD", table=None,
         axis="cost per hour: GPUs + memory below HBM (USD)")
_builtin("memory_cost_usd", "memory cost below HBM (USD)", "USD", table=None)
_builtin("total_cost_per_million_tokens_usd", "total cost per million tokens (USD)", "USD", table=None,
         axis="GPU + memory cost per million tokens (USD)")
_builtin("ttft_s", "time to first token (s)", "s", table=None, axis="time to first token (s)")
_builtin("e2e_s", "end-to-end latency (s)", "s", table=None, axis="end-to-end latency (s)")
_builtin("tpot_s", "time per output token (s)", "s", table=None, axis="time per output token (s)")
_builtin("queue_wait_s", "queue wait (s)", "s", table=None, axis="queue wait (s)")
_builtin("kv_capacity_bytes", "HBM KV capacity", "bytes", table=None, axis="HBM KV capacity (GB)")

# The report's key metrics (compared across a sweep's cells), in its table's order.
for _key in ("hit_ratio", "ttft_p50_s", "ttft_p99_s", "ttft_p999_s", "e2e_p99_s", "tpot_p99_s", "sla_attainment",
             "recomputed_tokens", "cost_per_million_tokens_usd", "provider_bill_usd", "upper_bound_replay_hit_ratio",
             "belady_replay_hit_ratio", "policy_replay_hit_ratio", "upper_bound_headroom", "belady_headroom",
             "characteristic_eviction_time_s"):
    CATALOGUE[_key] = Metric(**{**CATALOGUE[_key].__dict__, "key_metric": True})
    KEY_METRICS.append(_key)
del _key

__all__ = ["CATALOGUE", "EVICTION_REASONS", "KEY_METRICS", "Metric", "axis_label", "computed_metrics",
           "display_label", "format_value", "register", "table_rows", "unit_of", "unregister"]
