"""The packaged hardware and model catalogues (agentsim/profiles/*.yaml): every hardware x model
combination loads and validates, every number has its source beside it, and key values agree
with the project's hardware reference (shared/reference/hardware.md)."""

from __future__ import annotations

import math
import re

import pytest

from agentsim.cluster.costmodel import RooflineCostModel
from agentsim.engine.loading import scenario_from_dict
from agentsim.config.scenario import HardwareConfig, ModelConfig
from agentsim.config.units import parse_bytes
from agentsim.errors import InputError
from agentsim.hardware.profiles import load_catalogue

from tests.conftest import ROOT

HARDWARE = load_catalogue("hardware")
MODELS = load_catalogue("models")
TAG = re.compile(r"^\[(verified|secondhand|derived|estimate)\]")
REFERENCE = ROOT.parent / "shared" / "reference" / "hardware.md"


def test_the_catalogues_hold_the_issue_profiles():
    assert set(HARDWARE) >= {"gb300_nvl72", "gb200_nvl72", "h200_sxm", "h100_sxm"}
    assert set(MODELS) >= {"deepseek_v3", "kimi_k2", "qwen3_235b_a22b", "llama31_70b", "llama31_8b", "gpt_oss_120b"}


@pytest.mark.parametrize("catalogue,schema", [(HARDWARE, HardwareConfig), (MODELS, ModelConfig)], ids=["hardware", "models"])
def test_every_number_has_a_tagged_source_and_names_a_schema_field(catalogue, schema):
    for name, entry in catalogue.items():
        fields = set(entry) - {"sources"}
        sources = entry.get("sources") or {}
        assert fields, name
        assert fields <= set(schema.model_fields), (name, fields - set(schema.model_fields))
        assert set(sources) == fields, (name, "no source for", fields - set(sources), "stale source for", set(sources) - fields)
        for field, source in sources.items():
            assert isinstance(source, str) and TAG.match(source), (name, field, source)
            assert TAG.sub("", source).strip(), (name, field, source)   # more than a bare tag


def _gpus_for(hardware: dict, model: dict) -> int:
    """Smallest power-of-two GPU count whose HBM (after the 10% reserve) holds the weights plus
    room for KV (a quarter of the weights, at least 10 GB)."""
    hbm = parse_bytes(hardware["hbm_bytes_per_gpu"])
    weights = float(model["total_params"]) * float(model["bytes_per_param"])
    gpus = 1
    while hbm * gpus * 0.9 < weights + max(0.25 * weights, 10e9):
        gpus *= 2
    return gpus


@pytest.mark.parametrize("hw_name", sorted(HARDWARE))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_every_hardware_model_combination_loads_and_validates(hw_name, model_name):
    gpus = _gpus_for(HARDWARE[hw_name], MODELS[model_name])
    data = {
        "name": f"{hw_name}-{model_name}", "duration_s": "1m",
        "hardware": {"profile": hw_name, "gpus_per_instance": gpus},
        "model": {"profile": model_name},
        "cache": {"tiers": {"dram": {}, "disk": {}}},
        "workload": {"agent_classes": {"a": {"arrival": {"kind": "population", "concurrent": 1}}}},
    }
    scenario = scenario_from_dict(data, source=f"{hw_name}x{model_name}")
    hw, model = scenario.hardware, scenario.model
    # Every catalogue value reached the validated scenario (explicit fields would win; none here).
    hw_profile = HardwareConfig.model_validate({k: v for k, v in HARDWARE[hw_name].items() if k != "sources"})
    model_profile = ModelConfig.model_validate({k: v for k, v in MODELS[model_name].items() if k != "sources"})
    for field in set(HARDWARE[hw_name]) - {"sources"}:
        assert getattr(hw, field) == getattr(hw_profile, field), field
    for field in set(MODELS[model_name]) - {"sources"}:
        assert getattr(model, field) == getattr(model_profile, field), field
    assert scenario.kv_capacity_blocks_per_instance() > 0
    cost = RooflineCostModel.from_scenario(scenario)
    prefill_s = cost.prefill_flops(10_000, 0) / cost.flops_per_s
    assert math.isfinite(prefill_s) and prefill_s > 0


def test_a_profile_field_can_be_overridden_and_a_model_that_does_not_fit_is_an_input_error():
    base = {"name": "x", "duration_s": "1m", "workload": {"agent_classes": {"a": {"arrival": {"kind": "population", "concurrent": 1}}}}}
    scenario = scenario_from_dict({**base, "hardware": {"profile": "gb300_nvl72", "hbm_bytes_per_gpu": "288GB"},
                                   "model": {"profile": "llama31_8b"}})
    assert scenario.hardware.hbm_bytes_per_gpu == 288e9
    assert scenario.hardware.hbm_bandwidth_bytes_per_s == 8e12        # the rest from the profile
    with pytest.raises(InputError, match="do not fit"):
        scenario_from_dict({**base, "hardware": {"profile": "h100_sxm", "gpus_per_instance": 1},
                            "model": {"profile": "kimi_k2"}})


# Values from shared/reference/hardware.md (section 1.1 and the model table of section 2.2); HBM
# capacities in bytes as the devices report them (nvidia-smi MiB, via aiconfigurator-core's
# system files).
EXPECTED_HARDWARE = {
    ("gb300_nvl72", "hbm_bytes_per_gpu"): 284_208 * 2**20,   # 288 GB nominal
    ("h200_sxm", "hbm_bytes_per_gpu"): 141 * 2**30,
    ("b300_sxm", "hbm_bytes_per_gpu"): 275_040 * 2**20,
    ("gb300_nvl72", "hbm_bandwidth_bytes_per_s"): 8e12,
    ("gb300_nvl72", "nvlink_bytes_per_s"): 900e9,         # 1.8 TB/s bidirectional
    ("gb300_nvl72", "nvlink_domain_gpus"): 72,
    ("gb300_nvl72", "gpus_per_tray"): 4,
    ("gb200_nvl72", "hbm_bytes_per_gpu"): 189_471 * 2**20,
    ("gb200_nvl72", "hbm_bandwidth_bytes_per_s"): 8e12,
    ("h100_sxm", "hbm_bandwidth_bytes_per_s"): 3.35e12,
    ("h200_sxm", "hbm_bandwidth_bytes_per_s"): 4.8e12,
}
# KV bytes per token: (profile value, BF16 value in the reference table). MLA/GQA FP8 profiles
# store half the BF16 figure.
EXPECTED_KV = {
    "deepseek_v3": (35_136, 70_272),
    "kimi_k2": (35_136, 70_272),
    "qwen3_235b_a22b": (96_256, 192_512),
    "llama31_8b": (131_072, 131_072),
    "llama31_70b": (327_680, 327_680),
    "gpt_oss_120b": (36_864, 36_864),
}


@pytest.mark.parametrize("key,expected", sorted(EXPECTED_HARDWARE.items()), ids=lambda v: str(v))
def test_hardware_values_match_the_reference(key, expected):
    profile, field = key
    scenario_value = getattr(HardwareConfig.model_validate({k: v for k, v in HARDWARE[profile].items() if k != "sources"}), field)
    assert scenario_value == pytest.approx(expected)


@pytest.mark.parametrize("model_name", sorted(EXPECTED_KV))
def test_model_kv_bytes_per_token_match_the_reference(model_name):
    profile_value, bf16 = EXPECTED_KV[model_name]
    entry = MODELS[model_name]
    assert entry["kv_bytes_per_token"] == profile_value
    # The source line states the BF16 figure when the profile uses FP8 KV.
    assert f"{bf16:,}" in entry["sources"]["kv_bytes_per_token"]


def test_deepseek_v3_kv_bytes_follow_from_mla_dimensions():
    layers, kv_lora, rope = 61, 512, 64
    assert MODELS["deepseek_v3"]["kv_bytes_per_token"] == layers * (kv_lora + rope) * 1   # FP8
    assert layers * (kv_lora + rope) * 2 == 70_272                                          # BF16, as in the reference


@pytest.mark.skipif(not REFERENCE.exists(), reason="the shared hardware reference is not next to the repository")
def test_model_table_of_the_reference_agrees_with_the_catalogue():
    text = REFERENCE.read_text()
    rows = {"deepseek_v3": "DeepSeek-V3", "kimi_k2": "Kimi K2", "qwen3_235b_a22b": "Qwen3-235B-A22B",
            "llama31_8b": "Llama-3.1-8B", "gpt_oss_120b": "gpt-oss-120b"}
    for model_name, label in rows.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
        bold = int(re.search(r"\*\*([\d,]+)", row).group(1).replace(",", ""))
        assert bold == EXPECTED_KV[model_name][1], (model_name, row)
    assert "279 GB" in text and "8 TB/s" in text
