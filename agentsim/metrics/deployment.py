"""The deployment of a run in words (``summary["deployment"]``, built by
:func:`agentsim.engine.deployment.deployment_summary`), for the CLI summary and the report header."""

from __future__ import annotations

from agentsim.metrics.catalogue import format_value


def deployment_lines(deployment: dict | None) -> list[tuple[str, str]]:
    """(label, text) rows describing ``deployment``; empty for a summary without one (results
    written before it existed)."""
    if not isinstance(deployment, dict):
        return []
    d = deployment
    system = f" ({d['system']})" if d.get("system") else ""
    instances = d.get("instances", 1)
    gpus = f"{instances} x {d['gpus_per_instance']} GPUs" if instances != 1 else f"{d['gpus_per_instance']} GPUs"
    version = f" {d['engine_version']}" if d.get("engine_version") else ""
    precision = ", ".join(f"{k} {v}" for k, v in (d.get("precision") or {}).items())
    tiers = " + ".join(f"{t['name']} {format_value(t['capacity_bytes'], 'bytes')}" for t in d.get("tiers", []))
    rows = [
        ("hardware", f"{d.get('hardware')}{system}, {gpus}"),
        ("model", str(d.get("model", "?"))),
        ("engine", f"{d.get('engine')}{version} {d.get('parallelism')}, admission {d.get('kv_admission')}"
                   + (f", router {d['router']}" if d.get("router") else "")),
        ("precision", precision or "the model's published formats"),
        ("KV capacity", f"{format_value(d.get('kv_capacity_bytes_per_instance', 0.0), 'bytes')} HBM"
                        + (" per instance" if instances != 1 else "")),
        ("cache tiers", tiers or "hbm"),
        ("step timing", _timing_text(d, instances)),
    ]
    return rows


def _one_timing(source: str | None, deployment: str | None) -> str:
    text = source or "?"
    return text + (f" ({deployment})" if source == "measured" and deployment else "")


def _timing_text(d: dict, instances: int) -> str:
    """Which step timing every instance used: one timer for all of them (they share the
    deployment), or one per pool of a disaggregated run; a roofline fallback names its reason."""
    pools = d.get("timing_by_pool")
    if isinstance(pools, dict) and pools:
        return "; ".join(f"{role} workers {_one_timing(t.get('source'), t.get('deployment'))}" for role, t in pools.items())
    text = _one_timing(d.get("timing_source"), d.get("timing_deployment"))
    if instances != 1:
        text += f" on each of the {instances} instances"
    reason = d.get("timing_reason")
    if d.get("timing_source") == "roofline" and reason:
        text += f": {reason}"
    return text


def deployment_text(deployment: dict | None) -> str:
    """One line per row of :func:`deployment_lines`."""
    return "\n".join(f"{label}: {text}" for label, text in deployment_lines(deployment))
