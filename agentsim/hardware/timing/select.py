"""Which step timer serves a scenario's instances, and why.

``serving.timing``:

* ``measured``: aiconfigurator-core's tabulated databases (:mod:`.tables`); an error when they
  cannot time the deployment;
* ``roofline``: the analytic fallback (:mod:`.roofline`);
* ``auto`` (default): measured where the model (``model.name``), the system
  (``hardware.system``) and the engine are in the databases, else the roofline, with the reason.

The choice is reported as a :class:`TimingChoice` (summary keys ``timing_source``,
``timing_reason``, ``timing_deployment``). Built tables are kept per process and cached on disk,
so the instances of a cluster, and repeated runs, share one build.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentsim.errors import InputError
from agentsim.hardware.timing.deployment import Deployment, canonical_model
from agentsim.hardware.timing.expert_width import interpolate, missing_expert_width, neighbour_widths
from agentsim.hardware.timing.precision_fallback import nearest_precision
from agentsim.hardware.timing.prefill_host import prefill_host_s, prefill_host_source
from agentsim.hardware.timing.roofline import (ENGINE_OVERHEAD_S, KERNEL_FLOOR_S_PER_LAYER, MOE_GEMM_EFFICIENCY,
                                              RooflineTimer)
from agentsim.hardware.timing.tables import StepTables, TimingDataUnavailable, load_or_build
from agentsim.hardware.timing.speculative import with_speculative_decoding
from agentsim.hardware.timing.tabulated import TabulatedTimer

#: Tables built per deployment, or the message of why none could be (a string, not the
#: exception: re-raising one cached exception object chains every raise's traceback onto it,
#: and those frames keep every simulation of the process alive).
_BUILT: dict[Deployment, tuple[StepTables, list[str]] | str] = {}


@dataclass(frozen=True)
class TimingChoice:
    source: str                 # "measured" or "roofline"
    reason: str                 # why this source (for the roofline: why measured timing was not used)
    deployment: str | None      # the deployment as the databases name it, when one was built


def parallelism(scenario) -> tuple[int, int, int, int | None, int | None]:
    """(tp, pp, attention_dp, moe_tp, moe_ep) of one instance, defaults filled in."""
    par = scenario.serving.parallelism
    gpus = scenario.hardware.gpus_per_instance
    tp = par.tp if par.tp is not None else max(1, gpus // (par.pp * par.attention_dp))
    moe_tp, moe_ep = par.moe_tp, par.moe_ep
    if scenario.model.is_moe():
        width = tp * par.attention_dp
        if moe_tp is None and moe_ep is None:
            moe_tp, moe_ep = 1, width
        elif moe_tp is None:
            moe_tp = max(1, width // moe_ep)
        elif moe_ep is None:
            moe_ep = max(1, width // moe_tp)
    else:
        moe_tp = moe_ep = None
    return tp, par.pp, par.attention_dp, moe_tp, moe_ep


def deployment_of(scenario, max_context_tokens: int | None = None) -> Deployment:
    tp, pp, dp, moe_tp, moe_ep = parallelism(scenario)
    serving, precision = scenario.serving, scenario.serving.precision
    contexts = [c.max_context_tokens for c in scenario.workload.agent_classes.values()]
    # With MTP a decode step verifies draft_tokens + 1 tokens per sequence (speculative.py).
    width = 1 + (serving.speculative_decoding.draft_tokens if serving.speculative_decoding else 0)
    return Deployment(
        model=canonical_model(scenario.model.name), system=scenario.hardware.system, backend=serving.engine,
        backend_version=serving.engine_version, tp=tp, pp=pp, attention_dp=dp, moe_tp=moe_tp, moe_ep=moe_ep,
        gemm_quant=precision.weights, moe_quant=precision.moe, kv_quant=precision.kv_cache, fmha_quant=precision.attention,
        max_num_tokens=serving.batch_tokens(), max_num_seqs=max(serving.batch_requests() * width, 8),
        max_context_tokens=max_context_tokens or max(contexts + [8192]))


#: Most precision substitutions tried for one deployment (one per operation kind).
_MAX_SUBSTITUTIONS = 3


def _build_nearest(deployment: Deployment) -> tuple[StepTables, list[str]]:
    """Tables of ``deployment``; where the databases lack its expert-parallel width, interpolated
    between the widths either side (:mod:`.expert_width`, tried before any precision change, as
    the width is what is missing); else of the nearest precisions they have (with what was
    substituted). Raises the TimingDataUnavailable of the last deployment tried, with the
    substitutions that led to it, when nothing helps."""
    substitutions: list[str] = []
    candidate = deployment
    for _ in range(_MAX_SUBSTITUTIONS + 1):
        try:
            return load_or_build(candidate), substitutions
        except TimingDataUnavailable as exc:
            error = exc
            width = missing_expert_width(str(exc))
            if width is not None and width == candidate.moe_ep:
                interpolated = _between_widths(candidate)
                if interpolated is not None:
                    tables, notes = interpolated
                    return tables, substitutions + [n for n in notes if n not in substitutions]
            nearer = nearest_precision(candidate, str(exc))
            if nearer is None:
                break
            candidate, note = nearer
            substitutions.append(note)
    if substitutions:  # the last failure is the one that stopped it; the first may have been substituted away
        raise TimingDataUnavailable(f"{error} (after: {'; '.join(substitutions)})")
    raise error


def _between_widths(deployment: Deployment) -> tuple[StepTables, list[str]] | None:
    """Tables interpolated between the measured expert-parallel widths around ``deployment``'s,
    with the notes of both builds and of the interpolation; None when there are no such widths
    or either cannot be built."""
    around = neighbour_widths(deployment)
    if around is None:
        return None
    lower, upper, weight_lower = around
    try:
        (lower_tables, lower_notes), (upper_tables, upper_notes) = _build_nearest(lower), _build_nearest(upper)
    except TimingDataUnavailable:
        return None
    note = (f"MoE at {deployment.moe_ep}-way expert parallelism interpolated between the measured "
            f"{lower.moe_ep}- and {upper.moe_ep}-way layouts (the database has no {deployment.moe_ep}-way data)")
    notes = list(dict.fromkeys(lower_notes + upper_notes)) + [note]
    return interpolate(lower_tables, upper_tables, weight_lower, note), notes


def _tables(deployment: Deployment) -> tuple[StepTables, list[str]]:
    if deployment not in _BUILT:
        try:
            _BUILT[deployment] = _build_nearest(deployment)
        except TimingDataUnavailable as exc:
            _BUILT[deployment] = str(exc)
    built = _BUILT[deployment]
    if isinstance(built, str):
        raise TimingDataUnavailable(built)
    return built


def roofline_timer(scenario) -> RooflineTimer:
    hw, model, serving = scenario.hardware, scenario.model, scenario.serving
    tp, pp, dp, _, _ = parallelism(scenario)
    gpus = hw.gpus_per_instance
    weights = (serving.precision.moe or serving.precision.weights or "").lower()
    if "fp4" in weights and hw.fp4_flops_per_gpu:
        peak = hw.fp4_flops_per_gpu
    elif weights.startswith(("bfloat16", "float16")) or (not weights and model.bytes_per_param >= 2):
        peak = hw.bf16_flops_per_gpu or hw.dense_flops_per_gpu / 2.0
    else:
        peak = hw.dense_flops_per_gpu
    return RooflineTimer(
        active_params=model.active_params, total_params=model.total_params,
        bytes_per_param=scenario.weights_bytes() / model.total_params,  # at the serving precision
        attn_coeff=model.attn_coeff,
        decode_attn_coeff=model.decode_attn_coeff if model.decode_attn_coeff is not None else model.attn_coeff,
        kv_bytes_per_token=model.kv_bytes_per_token, flops_per_s=gpus * peak * hw.mfu_prefill,
        bytes_per_s=gpus * hw.hbm_bandwidth_bytes_per_s * hw.mbu_decode, chunk_tokens=serving.batch_tokens(),
        routed_experts=model.routed_experts, experts_per_token=model.experts_per_token, layers=model.layers,
        hidden_size=model.hidden_size, tp=tp, link_bytes_per_s=hw.nvlink_bytes_per_s,
        overhead_s=ENGINE_OVERHEAD_S[serving.engine], prefill_overhead_s=prefill_host_s(scenario),
        layer_floor_s=KERNEL_FLOOR_S_PER_LAYER,
        moe_efficiency=MOE_GEMM_EFFICIENCY)


def _why_not_measured(scenario) -> str | None:
    if scenario.model.name is None:
        return "model.name (the Hugging Face id) is not set"
    if scenario.hardware.system is None:
        return "hardware.system (the GPU system in the timing databases) is not set"
    return None


def build_timer(scenario, max_context_tokens: int | None = None):
    """``(timer, TimingChoice)`` for one instance of ``scenario``.

    Raises :class:`~agentsim.errors.InputError` (naming ``serving.timing``) when measured timing is
    required but unavailable."""
    mode = scenario.serving.timing
    if mode == "roofline":
        return (with_speculative_decoding(roofline_timer(scenario), scenario),
                TimingChoice("roofline", _with_host("serving.timing is roofline", scenario), None))
    reason = _why_not_measured(scenario)
    deployment = None
    if reason is None:
        deployment = deployment_of(scenario, max_context_tokens)
        try:
            tables, substitutions = _tables(deployment)
        except TimingDataUnavailable as exc:
            reason = str(exc)
        else:
            _, _, dp, _, _ = parallelism(scenario)
            timer = TabulatedTimer(tables, scenario.model.kv_bytes_per_token, scenario.serving.batch_tokens(),
                                   attention_dp=dp, overhead_s=ENGINE_OVERHEAD_S[scenario.serving.engine],
                                   prefill_overhead_s=prefill_host_s(scenario))
            reason = _with_host("; ".join([tables.provenance, *substitutions]), scenario)
            return with_speculative_decoding(timer, scenario), TimingChoice("measured", reason, deployment.describe())
    if mode == "measured":
        raise InputError(f"serving.timing is measured but {reason}", location="serving.timing")
    return with_speculative_decoding(roofline_timer(scenario), scenario), TimingChoice(
        "roofline", _with_host(f"measured timing unavailable: {reason}", scenario),
        deployment.describe() if deployment else None)


def _with_host(reason: str, scenario) -> str:
    """``reason`` with where the prefill host time came from (when the model has layers)."""
    return f"{reason}; {prefill_host_source(scenario)}" if scenario.model.layers else reason
