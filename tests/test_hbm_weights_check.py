"""The HBM capacity check counts the model weights beside an explicit KV capacity."""

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.errors import InputError
from agentsim.replay.timed import DEFAULT_SCENARIO
from tests.conftest import ROOT, run_cli


def _with_kv(kv_bytes: float):
    return scenario_from_dict({**DEFAULT_SCENARIO, "hardware": {**DEFAULT_SCENARIO["hardware"],
                                                                "kv_capacity_bytes": kv_bytes}}, source="test")


def test_kv_capacity_must_fit_beside_the_weights():
    fits = _with_kv(100e9)
    hbm = fits.hardware.hbm_bytes_per_gpu * fits.hardware.gpus_per_instance
    weights = fits.model.total_params * fits.model.bytes_per_param
    assert 0 < hbm - weights < hbm
    _with_kv(hbm - weights)  # exactly what the weights leave is accepted
    with pytest.raises(InputError) as info:
        _with_kv(hbm - weights + 10e9)  # fits in HBM alone, not beside the weights
    assert "hardware.kv_capacity_bytes" in str(info.value) and "weights" in str(info.value)


def test_replay_refuses_a_cache_that_does_not_fit_beside_the_weights(tmp_path):
    # 240K 64-token blocks of DeepSeek-V3 KV are 540 GB: beside 671 GB of weights they exceed
    # four GB300 GPUs' HBM (1,192 GB), though 540 GB alone would fit.
    trace = ROOT / "tests" / "fixtures" / "traces" / "weka" / "trace_0008.json.gz"
    proc = run_cli("replay", str(trace), "--mode", "open-loop", "--capacity-blocks", "240000", "--json")
    assert proc.returncode == 2, proc.stderr
    assert "kv_capacity_bytes" in proc.stderr and "weights" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("part, enum", [("weights", "GEMMQuantMode"), ("moe", "MoEQuantMode")])
def test_every_precision_the_loader_accepts_sizes_the_weights(part, enum):
    """Each quantisation mode aiconfigurator-core defines is sized at its own bytes per parameter
    (block scales where agentsim states them), not at the published format: int8_wo, fp8_static,
    sq, w4afp8, ... used to leave Llama-3.1-70B at its 141 GB of BF16."""
    common = pytest.importorskip("aiconfigurator_core.sdk.common")
    from agentsim.config.weights import PRECISION_BYTES_PER_PARAM

    for mode in getattr(common, enum):
        scenario = scenario_from_dict({**DEFAULT_SCENARIO, "model": {"profile": "llama31_70b"},
                                       "serving": {**DEFAULT_SCENARIO.get("serving", {}),
                                                   "precision": {part: mode.name}}}, source="test")
        expected = PRECISION_BYTES_PER_PARAM.get(mode.name, mode.value.memory)
        assert scenario.weights_bytes() == pytest.approx(scenario.model.total_params * expected), mode.name
