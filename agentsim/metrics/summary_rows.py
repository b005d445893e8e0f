"""A run summary as the rows a person reads: (label, text) with every figure in its unit.

The CLI summary table (:func:`agentsim.commands.common.summary_table`) and the HTML report
(:mod:`agentsim.report`) both show these rows, so a figure reads the same in both: seconds as
``45.5 ms`` / ``2.38 s`` / ``11 min``, bytes as GB or TB, rates and fractions with their unit
in the label, the per-key breakdowns (evictions by reason, recomputation by gap, ...) with the
unit of their entries. :func:`agent_class_rows` gives the per-agent-class figures of a mixed
workload (``summary["by_agent_class"]``) the same way.
"""

from __future__ import annotations

from typing import Any

from agentsim.metrics.catalogue import display_label, format_value, table_rows, unit_of

#: Breakdowns shown as one ``key=value`` row each: summary key -> (label, unit of each entry).
#: The label names the unit where the value cannot carry it (tokens, blocks, fractions).
BREAKDOWNS: dict[str, tuple[str, str]] = {
    "hit_ratio_by_tier": ("hit ratio by tier (fraction of prompt tokens)", "fraction"),
    "regime_by_tier": ("regime by tier", ""),
    "evictions_by_reason_blocks": ("evictions by reason (blocks)", "blocks"),
    "evicted_blocks_by_reason": ("evictions by reason (blocks)", "blocks"),
    "recomputed_tokens_by_gap": ("recomputed tokens by gap (tokens)", "tokens"),
    "recomputed_tokens_evicted_by_tier": ("recomputed tokens lost to eviction, by tier (tokens)", "tokens"),
    "queue_wait_share_by_cause": ("queue wait share by cause (fraction of queue time)", "fraction"),
    "kv_transfer_bytes_by_link_kind": ("prefill-to-decode KV transfer by link kind", "bytes"),
}

#: Summary keys never shown as rows (wall-clock time is not a result of the scenario).
HIDDEN = ("wall_s",)

#: Labels of per-class keys that are not in the main table.
_CLASS_LABELS = {"requests_measured": "requests (measured)"}


def _breakdown_text(values: dict, unit: str) -> str:
    return ", ".join(f"{key}={format_value(value, unit)}" for key, value in values.items())


def summary_rows(summary: dict, hidden: tuple[str, ...] = HIDDEN) -> list[tuple[str, str]]:
    """(label, text) of every catalogued metric present in ``summary`` (main table, then the
    memory-hierarchy rows), the breakdowns of :data:`BREAKDOWNS`, and the TTL and KV-capacity warnings. Values
    are formatted by :func:`~agentsim.metrics.catalogue.format_value` in their catalogue unit."""
    rows = []
    for key, label in table_rows("summary") + table_rows("hierarchy"):
        if key in summary and summary[key] is not None and key not in hidden:
            rows.append((display_label(key, label), format_value(summary[key], unit_of(key))))
    shown = set()
    for key, (label, unit) in BREAKDOWNS.items():
        values = summary.get(key)
        if isinstance(values, dict) and values and label not in shown:
            shown.add(label)
            rows.append((label, _breakdown_text(values, unit)))
    if summary.get("ttl_warning"):
        rows.append(("TTL warning", str(summary["ttl_warning"])))
    if summary.get("kv_capacity_warning"):
        rows.append(("KV warning", str(summary["kv_capacity_warning"])))
    return rows


def agent_class_rows(summary: dict) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(class names, rows of (label, one text per class)) of ``summary["by_agent_class"]``;
    no classes and no rows for a run with one agent class."""
    by_class = summary.get("by_agent_class")
    if not isinstance(by_class, dict) or not by_class:
        return [], []
    names = list(by_class)
    labels = dict(table_rows("summary"), **_CLASS_LABELS)
    keys = list(dict.fromkeys(key for figures in by_class.values() for key in figures))
    rows = []
    for key in keys:
        label = display_label(key, labels.get(key, key.replace("_", " ")))
        rows.append((label, [_class_value(by_class[name].get(key), key) for name in names]))
    return names, rows


def _class_value(value: Any, key: str) -> str:
    return "-" if value is None else format_value(value, unit_of(key))
