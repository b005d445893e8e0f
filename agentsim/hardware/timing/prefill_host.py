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
are not used, so check-timing's error on them tests the figures.

**Lower per deployment where it was measured lower.** Within one engine and kind the
deployments differ by up to 10x (the spread above). A deployment (engine, model, system) with at
least :data:`MIN_CALIBRATION_ROWS` such rows has its own median
(``agentsim/data/prefill_host_by_deployment.csv``, written by ``scripts/calibrate_prefill_host.py``
with :mod:`agentsim.experiments.host_calibration` from ``measured_runs.csv``); where it is below
the engine's figure the deployment gets it (Qwen3-235B on TensorRT-LLM / H100: 0.47 ms a layer
against 1.5). Where it is above, the engine's figure stays: a low-load gap of 5-13 ms a layer
(DeepSeek-R1 on TensorRT-LLM / H200, DeepSeek-V3 on SGLang / B300) is far more than launching a
layer's kernels costs, and charged to every prefilling iteration it makes the same deployment's
loaded rows too slow (a disaggregated H200 row: 19.0 s of TTFT predicted against 2.1 s measured,
3.0 s with the engine's figure), so the excess is a per-request cost outside the iteration that
is not modelled. A scenario can set its own with ``serving.prefill_host_s_per_layer``;
:func:`prefill_host_source` says which a scenario got.
"""

from __future__ import annotations

import csv
import functools
import io
from importlib import resources

from agentsim.hardware.timing.deployment import canonical_model

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


#: Fewest calibration rows for a deployment's own figure; with fewer its engine's is used.
MIN_CALIBRATION_ROWS = 3
#: The per-deployment calibration table packaged with agentsim.
CALIBRATION_FILE = "data/prefill_host_by_deployment.csv"


@functools.lru_cache(maxsize=1)
def deployment_figures() -> dict[tuple[str, str, str], tuple[float, int]]:
    """``{(engine, model, system): (host seconds per layer, calibration rows)}`` from
    :data:`CALIBRATION_FILE`, the deployments with at least :data:`MIN_CALIBRATION_ROWS` rows
    (``model`` as aiconfigurator-core names it, ``system`` a hardware profile's system)."""
    text = resources.files("agentsim").joinpath(CALIBRATION_FILE).read_text()
    figures = {}
    for entry in csv.DictReader(io.StringIO(text)):
        rows = int(entry["rows"])
        if rows >= MIN_CALIBRATION_ROWS:
            key = (entry["engine"], entry["model"], entry["system"])
            figures[key] = (float(entry["host_ms_per_layer"]) * 1e-3, rows)
    return figures


def deployment_key(scenario) -> tuple[str, str, str]:
    """``(engine, model, system)`` of ``scenario`` as the calibration table keys deployments
    (``model`` as aiconfigurator-core names it)."""
    return scenario.serving.engine, canonical_model(scenario.model.name), scenario.hardware.system


def _figures(scenario) -> tuple[float, tuple[float, int] | None]:
    """The engine's figure for the scenario's model kind, and the deployment's calibrated
    ``(figure, rows)`` (None when the table has no such deployment)."""
    engines = PREFILL_HOST_S_PER_LAYER[(scenario.serving.engine, scenario.model.is_moe())]
    return engines, deployment_figures().get(deployment_key(scenario))


def prefill_host_s_per_layer(scenario) -> float:
    """Host seconds per layer of a prefilling iteration: ``serving.prefill_host_s_per_layer``,
    else the engine's figure for the model's kind, or the deployment's calibrated one where that
    is lower."""
    if scenario.serving.prefill_host_s_per_layer is not None:
        return scenario.serving.prefill_host_s_per_layer
    engines, measured = _figures(scenario)
    return engines if measured is None else min(measured[0], engines)


def prefill_host_source(scenario) -> str:
    """Where :func:`prefill_host_s_per_layer` took the scenario's figure from, in words (for the
    timing provenance in the summary and ``scenario.resolved.yaml``)."""
    per_layer_ms = prefill_host_s_per_layer(scenario) * 1e3
    if scenario.serving.prefill_host_s_per_layer is not None:
        return f"prefill host time {per_layer_ms:.3g} ms/layer from serving.prefill_host_s_per_layer"
    engine, model, system = deployment_key(scenario)
    engines, measured = _figures(scenario)
    engines_text = f"{engine}'s figure for {'MoE' if scenario.model.is_moe() else 'dense'} models"
    if measured is None:
        return f"prefill host time {per_layer_ms:.3g} ms/layer, {engines_text}"
    calibrated = f"calibrated for {engine} {model} on {system} ({measured[1]} benchmark rows)"
    if measured[0] < engines:
        return f"prefill host time {per_layer_ms:.3g} ms/layer {calibrated}"
    return (f"prefill host time {per_layer_ms:.3g} ms/layer, {engines_text} (below the "
            f"{measured[0] * 1e3:.3g} ms/layer {calibrated})")


def prefill_host_s(scenario) -> float:
    """Host seconds an iteration with at least one prefill chunk adds to its kernels' time: the
    per-layer figure times ``model.layers`` (0 for a model that gives no layer count)."""
    return prefill_host_s_per_layer(scenario) * scenario.model.layers
