"""Warnings for runs that cannot do their job: valid input whose result would mislead.

Not errors (the scenario is well formed and the run is reproducible), but a run that rejects
every request, or a TTL policy whose TTL is longer than the whole run, answers no question
about the cache. :func:`scenario_warnings` is checked before the run, :func:`result_warnings`
after it; the CLI prints each as one ``warning:`` line on stderr (a warning given before the
run is not repeated after it).

Too little KV (:func:`kv_capacity_warning`): the KV capacity left beside the weights must hold
at least one request at the context limit (``max_context_tokens``, the model window the
workload's prompts are capped at). It is the check a serving engine makes at start-up (vLLM
refuses to start when its KV cache cannot hold one ``max_model_len`` sequence), it does not
depend on the run's outcome, and a run that fails it rejects every request that reaches the
limit. The other candidate, "cannot hold ``max_num_seqs`` mean prompts", was not chosen: it
holds for every deliberately KV-bound study (the shipped rack and TTL scenarios hold 10 to 35
mean prompts beside 32 to 64 batch slots), where being bound by KV memory is the finding, not a
mistake; the summary's queue causes (``queue_kv_mean_s``) already say when that happens.
"""

from __future__ import annotations


def _policy_refs(scenario):
    yield "cache.eviction", scenario.cache.eviction
    tiers = scenario.cache.tiers
    if tiers is not None:
        for name, tier in tiers.lower_tiers():
            yield f"cache.tiers.{name}.eviction", tier.eviction


def kv_capacity_warning(scenario) -> str | None:
    """Why the KV capacity of an instance (of each pool, disaggregated) cannot hold one request
    at the context limit of the agent class with the longest one, or None when it can."""
    from agentsim.config.disaggregation import pool_scenario
    from agentsim.metrics.catalogue import format_value

    classes = scenario.workload.agent_classes
    if not classes:
        return None
    name = max(classes, key=lambda c: classes[c].max_context_tokens)
    limit_tokens = classes[name].max_context_tokens
    views = ([("instance", "hardware.kv_capacity_bytes", scenario)] if scenario.serving.disaggregation is None else
             [(f"{role} worker", f"serving.disaggregation.{role}.kv_capacity_bytes", pool_scenario(scenario, role))
              for role in ("prefill", "decode")])
    for who, knob, view in views:
        capacity_tokens = view.kv_capacity_blocks_per_instance() * view.cache.block_tokens
        if capacity_tokens < limit_tokens:
            needed_bytes = limit_tokens * view.model.kv_bytes_per_token
            return (f"too little KV: {format_value(view.kv_capacity_bytes_per_instance(), 'bytes')} of KV per "
                    f"{who} holds {capacity_tokens:,} tokens, less than one request at the context limit "
                    f"(workload.agent_classes.{name}.max_context_tokens = {limit_tokens:,} tokens, "
                    f"{format_value(needed_bytes, 'bytes')} of KV): requests whose context grows that long are "
                    f"rejected (a serving engine would not start); raise {knob} or lower max_context_tokens")
    return None


def scenario_warnings(scenario) -> list[str]:
    """Problems visible before the run: a TTL that cannot fire within ``duration_s``; too
    little KV for one request at the context limit (:func:`kv_capacity_warning`); a tier whose
    kind has no price, charged at zero (:func:`~agentsim.engine.economics.unpriced_tier_warning`)."""
    from agentsim.cache.policies import EVICTION_POLICIES
    from agentsim.engine.economics import unpriced_tier_warning

    notes = []
    for note in (kv_capacity_warning(scenario), unpriced_tier_warning(scenario)):
        if note is not None:
            notes.append(note)
    for path, ref in _policy_refs(scenario):
        policy = EVICTION_POLICIES.create(ref.name, ref.params)
        ttl_s = getattr(policy, "ttl_s", None)
        if isinstance(ttl_s, (int, float)) and ttl_s != float("inf") and ttl_s > scenario.duration_s:
            notes.append(f"{path}: the TTL of {ttl_s:g} s is longer than the run (duration_s {scenario.duration_s:g} s), "
                         f"so no block can expire while sessions arrive: the run measures {ref.name!r} as a plain "
                         "capacity policy (lengthen duration_s or shorten the TTL)")
    return notes


def result_warnings(summary: dict) -> list[str]:
    """Problems visible in the result: too little KV for one request at the context limit
    (``kv_capacity_warning``), calls cut at the drain limit (:mod:`agentsim.engine.drain`),
    every measured request rejected (with the reasons), a TTL that never fired
    (``ttl_warning``, judged against the tier the TTL applies to)."""
    notes = []
    if summary.get("kv_capacity_warning"):
        notes.append(str(summary["kv_capacity_warning"]))
    if summary.get("ttl_warning"):
        notes.append(str(summary["ttl_warning"]))
    cut = summary.get("calls_cut_at_drain_limit") or 0
    if cut and summary.get("drain_limit_s") is not None:
        notes.append(f"{cut:,} calls were still in flight at the drain limit (t={summary['drain_limit_s']:g} s) and "
                     "are counted as rejected (reason drain_limit): a queue that never empties or a call that can "
                     "never be scheduled; raise limits.max_drain_s if the calls only need longer")
    requests = summary.get("requests") or 0
    if requests and summary.get("requests_rejected") == requests:
        reasons = summary.get("requests_rejected_by_reason") or {}
        why = ", ".join(f"{reason or 'unknown'}: {count:,}" for reason, count in reasons.items())
        notes.append(f"every one of the {requests:,} measured requests was rejected ({why or 'none fit the KV capacity'}): "
                     "latency and hit metrics are empty; for kv_capacity raise hardware.kv_capacity_bytes or "
                     "shorten the prompts")
    return notes
