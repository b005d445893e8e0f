"""The host time of an iteration that prefills (agentsim.hardware.timing.prefill_host): added once
per iteration with a prefill chunk, never to a decode-only step; a deployment's own calibrated
figure where the benchmarks measured it, else the engine's for the model kind; overridable per
scenario, and said in the timing provenance."""

import dataclasses

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario
from agentsim.hardware.timing.prefill_host import (MIN_CALIBRATION_ROWS, PREFILL_HOST_S_PER_LAYER, deployment_figures,
                                                   deployment_key, prefill_host_s, prefill_host_s_per_layer,
                                                   prefill_host_source)
from agentsim.hardware.timing.roofline import RooflineTimer
from agentsim.hardware.timing.select import build_timer, roofline_timer

DENSE = RooflineTimer(active_params=8e9, total_params=8e9, bytes_per_param=1.0, attn_coeff=1e6,
                      decode_attn_coeff=1e6, kv_bytes_per_token=131072, flops_per_s=1e15, bytes_per_s=4e12,
                      chunk_tokens=8192, layers=32, hidden_size=4096)


def _scenario(engine="sglang", model="deepseek_v3", timing="roofline", profile="h200_sxm", **serving):
    return scenario_from_dict({
        "name": "p", "duration_s": 20, "seed": 1,
        "hardware": {"profile": profile, "gpus_per_instance": 8},
        "model": {"profile": model}, "serving": {"timing": timing, "engine": engine, **serving},
        "workload": {"agent_classes": {"c": {"arrival": {"kind": "population", "concurrent": 4},
                                             "tools_prefix_tokens": 0, "initial_context_tokens": 1024,
                                             "calls_per_session": 3, "output_tokens": 64,
                                             "tool_gap_s": 0.5}}}})


def test_an_iteration_with_a_prefill_chunk_pays_the_host_time_once_and_a_decode_step_never():
    host = dataclasses.replace(DENSE, prefill_overhead_s=0.05)
    assert host.iteration_s((), 8, 8 * 1024) == DENSE.iteration_s((), 8, 8 * 1024)
    one = host.iteration_s(((1024, 0),), 8, 8 * 1024) - DENSE.iteration_s(((1024, 0),), 8, 8 * 1024)
    four = host.iteration_s(((1024, 0),) * 4, 0, 0.0) - DENSE.iteration_s(((1024, 0),) * 4, 0, 0.0)
    assert one == pytest.approx(0.05) and four == pytest.approx(0.05)   # per iteration, not per prompt
    # A prompt chunked over three iterations pays it three times.
    chunked = dataclasses.replace(host, chunk_tokens=1024)
    assert chunked.prefill_s(3072, 0) - dataclasses.replace(DENSE, chunk_tokens=1024).prefill_s(3072, 0) == \
        pytest.approx(0.15)


@pytest.mark.parametrize("engine, model", [("sglang", "deepseek_v3"), ("vllm", "deepseek_v3"),
                                           ("trtllm", "llama31_70b"), ("vllm", "llama31_70b")])
def test_the_engines_figure_for_the_models_kind_times_its_layers(engine, model):
    scenario = _scenario(engine, model, profile="gb300_nvl72")   # no calibration rows on GB300
    assert deployment_key(scenario) not in deployment_figures()
    per_layer = PREFILL_HOST_S_PER_LAYER[(engine, scenario.model.is_moe())]
    assert prefill_host_s(scenario) == pytest.approx(per_layer * scenario.model.layers)
    assert roofline_timer(scenario).prefill_overhead_s == pytest.approx(per_layer * scenario.model.layers)


def _as(scenario, name, system):
    return scenario.model_copy(update={"model": scenario.model.model_copy(update={"name": name}),
                                       "hardware": scenario.hardware.model_copy(update={"system": system})})


def test_a_deployment_calibrated_below_its_engine_gets_its_own_figure_and_says_so():
    # Qwen3-235B on TensorRT-LLM / H100 measures far less host time than the engine's MoE median.
    scenario = _as(_scenario("trtllm", "deepseek_v3"), "Qwen/Qwen3-235B-A22B-FP8", "h100_sxm")
    figure, rows = deployment_figures()[deployment_key(scenario)]
    assert rows >= MIN_CALIBRATION_ROWS and 0 <= figure < PREFILL_HOST_S_PER_LAYER[("trtllm", True)] / 2
    assert prefill_host_s_per_layer(scenario) == figure
    assert "calibrated for trtllm Qwen/Qwen3-235B-A22B-FP8 on h100_sxm" in prefill_host_source(scenario)
    # The same model on a system it was not measured on keeps the engine's figure.
    elsewhere = _as(scenario, "Qwen/Qwen3-235B-A22B-FP8", "gb300")
    assert prefill_host_s_per_layer(elsewhere) == PREFILL_HOST_S_PER_LAYER[("trtllm", True)]
    assert "trtllm's figure for MoE models" in prefill_host_source(elsewhere)
    # A deployment that measured more than its engine's figure keeps the engine's (the excess is
    # not an iteration cost) and says what it measured.
    slower = _as(scenario, "deepseek-ai/DeepSeek-R1", "h200_sxm")
    assert deployment_figures()[deployment_key(slower)][0] > PREFILL_HOST_S_PER_LAYER[("trtllm", True)]
    assert prefill_host_s_per_layer(slower) == PREFILL_HOST_S_PER_LAYER[("trtllm", True)]
    assert "trtllm's figure for MoE models (below the" in prefill_host_source(slower)
    # The scenario's own figure wins over both.
    own = scenario.model_copy(update={"serving": scenario.serving.model_copy(update={"prefill_host_s_per_layer": 1e-3})})
    assert prefill_host_s_per_layer(own) == 1e-3 and "serving.prefill_host_s_per_layer" in prefill_host_source(own)


def test_the_calibration_table_is_whole_and_only_well_measured_deployments_are_used():
    from importlib import resources
    import csv, io

    entries = list(csv.DictReader(io.StringIO(resources.files("agentsim").joinpath(
        "data/prefill_host_by_deployment.csv").read_text())))
    assert len(entries) >= 20
    for entry in entries:
        assert entry["engine"] in ("vllm", "sglang", "trtllm") and int(entry["rows"]) >= 1
        assert 0 <= float(entry["host_ms_per_layer"]) < 50 and int(entry["layers"]) > 0
    used = {(e["engine"], e["model"], e["system"]) for e in entries if int(e["rows"]) >= MIN_CALIBRATION_ROWS}
    assert set(deployment_figures()) == used and len(used) < len(entries)   # some have too few rows


def test_the_timing_provenance_names_the_host_time():
    scenario = _as(_scenario("trtllm", "deepseek_v3", timing="auto"), "Qwen/Qwen3-235B-A22B-FP8", "h100_sxm")
    _, choice = build_timer(scenario)
    assert choice.source == "measured" and "calibrated for trtllm Qwen/Qwen3-235B-A22B-FP8 on h100_sxm" in choice.reason
    _, roofline = build_timer(_scenario("sglang", "deepseek_v3", profile="gb300_nvl72"))
    assert "sglang's figure for MoE models" in roofline.reason


def test_moe_layers_cost_more_host_time_than_dense_ones_on_every_engine():
    for engine in ("vllm", "sglang", "trtllm"):
        assert PREFILL_HOST_S_PER_LAYER[(engine, True)] > PREFILL_HOST_S_PER_LAYER[(engine, False)]


def test_measured_timing_gets_it_too():
    scenario = _scenario("sglang", "deepseek_v3", timing="auto")
    scenario = scenario.model_copy(update={"model": scenario.model.model_copy(update={"name": "deepseek-ai/DeepSeek-V3"}),
                                           "hardware": scenario.hardware.model_copy(update={"system": "h200_sxm"})})
    timer, choice = build_timer(scenario)
    assert choice.source == "measured", choice.reason
    assert timer.prefill_overhead_s == pytest.approx(prefill_host_s(scenario)) and timer.prefill_overhead_s > 0


def test_the_scenario_overrides_it_and_it_lengthens_the_first_token():
    default = _scenario("vllm", "deepseek_v3")
    off = _scenario("vllm", "deepseek_v3", prefill_host_s_per_layer=0)
    heavy = _scenario("vllm", "deepseek_v3", prefill_host_s_per_layer=0.002)
    assert prefill_host_s(off) == 0 and prefill_host_s(heavy) == pytest.approx(0.002 * 61)
    ttft = {name: run_scenario(s).summary["ttft_p50_s"] for name, s in
            (("off", off), ("default", default), ("heavy", heavy))}
    assert ttft["off"] < ttft["default"] < ttft["heavy"]
    # At 4 clients nothing queues: the heavy run's first tokens come about its host time later.
    assert ttft["heavy"] - ttft["off"] == pytest.approx(0.002 * 61, rel=0.5)


def test_a_negative_or_absurd_figure_is_refused_at_its_yaml_path():
    from agentsim.errors import InputError

    for bad in (-1e-3, 5):
        with pytest.raises(InputError) as err:
            _scenario(prefill_host_s_per_layer=bad)
        assert "prefill_host_s_per_layer" in err.value.render()
