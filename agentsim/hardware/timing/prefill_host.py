"""Host time of an iteration that prefills: what per-kernel timing does not see.

The measured databases (and the roofline) time kernels. A decode step replays a CUDA graph, so
its host work hides behind the GPU's (the per-iteration ``overhead_s`` of
:mod:`.roofline` covers scheduling and sampling). An iteration with a prefill chunk does not:
SGLang and TensorRT-LLM run prefill batches eagerly (their CUDA graphs cover decode batch
sizes only) and vLLM runs them through piecewise-compiled graphs with the attention and MoE
kernels launched between the pieces; every layer's kernels are launched from Python, and the
MoE layers synchronise host and device (the tokens routed to each expert size the grouped
GEMMs and the all-to-all buffers), so the GPU waits on the host once or twice per layer. The
step then costs its kernels plus a host time per layer, whatever the number of prompts in it.

The figures are calibrated, per engine and per model kind (MoE or dense), on the measured
benchmark rows where nothing else can hide: aggregated rows of at most 4 concurrent clients
(no queue, so measured TTFT = the wait for the step in progress + one prefill step + this),
emulated with the benchmark's own request lengths and no host time; the median of
``(measured - predicted TTFT) / layers`` over the rows of each engine and kind
(``measured_runs.csv``, 2026-12-04; docs/validation.md, "Host time of a prefill step"):

===========  =====  =========================================================================
engine       kind   ms per layer (rows; spread of the per-model medians)
===========  =====  =========================================================================
sglang       MoE    2.9 (117 rows; DeepSeek-R1/V3 2.2, Qwen3.5-397B 3.3, GLM-5 3.5, Qwen3-235B 1.5)
trtllm       MoE    1.5 (66; DeepSeek-R1/V3 1.7, gpt-oss-120b 1.5, Qwen3-235B 0.4)
vllm         MoE    0.77 (103; Kimi-K2.5 1.2, MiniMax-M2.5 0.7, gpt-oss-120b 0.6)
trtllm       dense  0.47 (39; Llama-3.1-70B 0.1, Qwen3-32B 3.1)
vllm         dense  0.19 (30; Llama-3.1-70B)
sglang       dense  0.25 (no rows of 4 clients or fewer: the dense figures of the other two)
===========  =====  =========================================================================

aiconfigurator-core's own estimate adds 0.8 ms per layer for vLLM, fitted to its benchmark
corpus; the vLLM MoE figure here agrees with it. Rows of more clients (the rest of the file)
are not used, so check-timing's error on them tests the figures. A scenario can set its own
with ``serving.prefill_host_s_per_layer``.
"""

from __future__ import annotations

#: Host seconds per layer of an iteration that prefills, by (engine, model is MoE). [calibrated,
#: see the module docstring]
PREFILL_HOST_S_PER_LAYER: dict[tuple[str, bool], float] = {
    ("sglang", True): 2.9e-3,
    ("trtllm", True): 1.5e-3,
    ("vllm", True): 0.77e-3,
    ("sglang", False): 0.25e-3,
    ("trtllm", False): 0.47e-3,
    ("vllm", False): 0.19e-3,
}


def prefill_host_s_per_layer(scenario) -> float:
    """Host seconds per layer of a prefilling iteration: ``serving.prefill_host_s_per_layer``,
    else the engine's calibrated figure for the model's kind."""
    serving = scenario.serving
    if serving.prefill_host_s_per_layer is not None:
        return serving.prefill_host_s_per_layer
    return PREFILL_HOST_S_PER_LAYER[(serving.engine, scenario.model.is_moe())]


def prefill_host_s(scenario) -> float:
    """Host seconds an iteration with at least one prefill chunk adds to its kernels' time: the
    per-layer figure times ``model.layers`` (0 for a model that gives no layer count)."""
    return prefill_host_s_per_layer(scenario) * scenario.model.layers
