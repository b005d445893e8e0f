"""Weight memory of the served model under the scenario's precision.

The model profile gives ``bytes_per_param`` for the checkpoint as published (BF16 for
Llama-3.1-70B: 141 GB). An engine serving it quantised (``serving.precision.weights`` /
``.moe``: FP8, NVFP4, ...) holds the quantised weights, and the HBM left for KV is what *they*
leave. MoE models split the parameters: the routed experts are stored in ``precision.moe``, the
rest (attention, shared experts, embeddings) in ``precision.weights``.

Bytes per parameter: :data:`PRECISION_BYTES_PER_PARAM` where agentsim states the block scales,
else the ``memory`` of aiconfigurator-core's own quantisation mode (``GEMMQuantMode`` for
``weights``, ``MoEQuantMode`` for ``moe``), so every mode the loader accepts is sized at its
format (``int8_wo``, ``fp8_static``, ``sq``, ``w4afp8``, ... were sized at the published format).
A name known to neither is refused at load time (``check_timing_names``), so the published
format is used only when no precision is given.
"""

from __future__ import annotations

import functools

#: Weight bytes per parameter of each of aiconfigurator-core's quantisations (block scales
#: included for the 4-bit ones: NVFP4 one FP8 scale per 16 values, MXFP4 one per 32).
PRECISION_BYTES_PER_PARAM = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5625,
                             "int4_wo": 0.5625, "w4a16_mxfp4": 0.53125}


#: aiconfigurator-core's enum of the quantisation modes of each sized part.
_QUANT_ENUMS = {"weights": "GEMMQuantMode", "moe": "MoEQuantMode"}


@functools.cache
def bytes_per_param(name: str | None, part: str = "weights") -> float | None:
    """Weight bytes per parameter of the quantisation mode ``name`` for ``part`` (``weights`` or
    ``moe``); None when ``name`` is None or names no mode agentsim or aiconfigurator-core knows."""
    if name is None:
        return None
    if name.lower() in PRECISION_BYTES_PER_PARAM:
        return PRECISION_BYTES_PER_PARAM[name.lower()]
    try:
        from aiconfigurator_core.sdk import common
    except ImportError:  # the loader cannot check names either; the published format is used
        return None
    mode = getattr(getattr(common, _QUANT_ENUMS[part]), name, None)
    memory = getattr(getattr(mode, "value", None), "memory", None)
    return float(memory) if isinstance(memory, (int, float)) and memory > 0 else None


def routed_expert_params(model) -> float:
    """Parameters in the routed experts (0 for a dense model): of ``E`` experts ``k`` are active
    per token, so the inactive ones, ``total - active``, are ``1 - k/E`` of them."""
    if not (model.routed_experts and model.experts_per_token) or model.active_params >= model.total_params:
        return 0.0
    return (model.total_params - model.active_params) / (1.0 - model.experts_per_token / model.routed_experts)


def weights_bytes(model, precision) -> float:
    """Bytes of the weights an instance holds: each part at its precision's bytes per parameter
    when ``precision`` names a known format, else at the model's ``bytes_per_param``."""
    dense_bytes = bytes_per_param(precision.weights, "weights") or model.bytes_per_param
    routed = routed_expert_params(model)
    routed_bytes = bytes_per_param(precision.moe, "moe") or dense_bytes
    if not routed:
        # A dense model (or MoE without expert counts): one format; the experts' if given.
        return model.total_params * routed_bytes
    return (model.total_params - routed) * dense_bytes + routed * routed_bytes
