"""What a run simulated: the deployment, stated in every result (``summary["deployment"]``).

A figure without its deployment cannot be read: "TTFT p99 2.4 s" means one thing on one GB300
tray with 80 GB of KV and roofline timing, another on a rack with a DRAM tier and measured
kernels. :func:`deployment_summary` collects hardware, GPUs, model, engine, parallelism, KV
capacity, the cache tiers and the step-timing source from the scenario and the wired instances;
:func:`agentsim.metrics.deployment.deployment_lines` words it for the CLI and the report.
"""

from __future__ import annotations

from typing import Any

from agentsim.hardware.timing.select import parallelism


def parallelism_text(scenario) -> str:
    """``tp4``, ``tp2 pp2``, ``tp4 moe_tp1 moe_ep4``: one instance's split, defaults filled in."""
    tp, pp, dp, moe_tp, moe_ep = parallelism(scenario)
    text = f"tp{tp}" + (f" pp{pp}" if pp > 1 else "") + (f" dp{dp}" if dp > 1 else "")
    if moe_tp is not None or moe_ep is not None:
        text += f" moe_tp{moe_tp or 1} moe_ep{moe_ep or 1}"
    return text


def deployment_summary(scenario, instances: list, timing, pool_timings: dict | None = None) -> dict[str, Any]:
    """The ``deployment`` object of ``summary.json`` (sizes in bytes, per instance unless named
    otherwise; ``tiers`` lists the cache tiers of one instance, HBM first, with their KV
    capacity). ``timing`` is the step timer of ``instances`` (one for all of them: they share
    the deployment); ``pool_timings`` (role -> timer) the timers of a disaggregated run's pools,
    recorded as ``timing_by_pool``."""
    hw, model, serving = scenario.hardware, scenario.model, scenario.serving
    block_bytes = scenario.cache.block_tokens * model.kv_bytes_per_token
    tiers = list(getattr(instances[0].cache, "tiers", None) or [instances[0].cache]) if instances else []
    precision = {k: v for k, v in serving.precision.model_dump().items() if v is not None}
    return {
        "hardware": hw.profile or "custom",
        "system": hw.system,
        "instances": hw.instances,
        "gpus_per_instance": hw.gpus_per_instance,
        "gpus": hw.instances * hw.gpus_per_instance,
        "model": model.name or model.profile or "custom",
        "engine": serving.engine,
        "engine_version": serving.engine_version,
        "parallelism": parallelism_text(scenario),
        "precision": precision,
        "kv_admission": serving.kv_admission_rule(),
        "router": serving.router if hw.instances > 1 else None,
        "block_tokens": scenario.cache.block_tokens,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "kv_capacity_bytes_per_instance": float(scenario.kv_capacity_blocks_per_instance() * block_bytes),
        "kv_capacity_bytes": float(scenario.kv_capacity_blocks_per_instance() * block_bytes * hw.instances),
        "tiers": [{"name": tier.name, "capacity_bytes": float(tier.capacity_blocks * block_bytes),
                   "eviction": getattr(tier.policy, "registered_name", None)} for tier in tiers],
        "timing_source": timing.source,
        "timing_deployment": timing.deployment,
        "timing_reason": timing.reason,
        "timing_by_pool": ({role: {"source": t.source, "deployment": t.deployment, "reason": t.reason}
                            for role, t in pool_timings.items()} if pool_timings else None),
    }
