"""Token economics: GPU cost per million tokens and the provider-style cache bill."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario
from agentsim.engine.economics import DEFAULT_PRICES, economics_summary, provider_bill_usd, scenario_ttl_s


def requests_table(rows):
    columns = ["prompt_tokens", "output_tokens", "hit_tokens", "recomputed_tokens", "rejected"]
    return pd.DataFrame(rows, columns=columns)


def test_write_multiplier_follows_provider_ttl_tiers():
    assert DEFAULT_PRICES.write_multiplier(None) == 1.25
    assert DEFAULT_PRICES.write_multiplier(300) == 1.25
    assert DEFAULT_PRICES.write_multiplier(301) == 2.0
    assert DEFAULT_PRICES.write_multiplier(3600) == 2.0


def test_scenario_ttl_from_policy_params():
    scenario = lambda name, params: SimpleNamespace(cache=SimpleNamespace(eviction=SimpleNamespace(name=name, params=params)))  # noqa: E731
    assert scenario_ttl_s(scenario("lru", {})) is None
    assert scenario_ttl_s(scenario("ttl_1h", {})) == 3600          # the policy's default TTL
    assert scenario_ttl_s(scenario("ttl_expiry", {"ttl_s": "20m"})) == 1200
    assert scenario_ttl_s(scenario("not_a_policy", {"ttl": 300})) == 300


def test_provider_bill_by_hand(small_scenario_yaml):
    scenario = load_scenario(small_scenario_yaml)
    # 1M prompt tokens: 800k read from cache, 200k computed (written); 100k output; one rejected request ignored.
    requests = requests_table([[600_000, 50_000, 500_000, 100_000, False], [400_000, 50_000, 300_000, 100_000, False],
                               [999_999, 999, 0, 999_999, True]])
    summary = {"gpu_seconds": 3600.0 * 4, "gpu_busy_fraction": 0.5, "simulated_s": 3600.0}
    out = economics_summary(scenario, requests, summary)
    # Bill: 3 $/M input: 0.8M x 0.1 x 3 + 0.2M x 1.25 x 3 = 0.24 + 0.75; output 0.1M x 15 = 1.5.
    assert out["provider_bill_usd"] == pytest.approx(0.24 + 0.75 + 1.5)
    assert out["provider_bill_no_cache_usd"] == pytest.approx(3.0 + 1.5)
    assert out["provider_cache_savings_fraction"] == pytest.approx(1 - 2.49 / 4.5)
    assert out["provider_input_usd_per_million"] == pytest.approx(0.99)
    assert (out["cache_read_tokens"], out["cache_write_tokens"]) == (800_000, 200_000)
    # GPU cost: 4 GPU-hours at the profile's $6 -> $24 over 1.1M tokens.
    assert out["gpu_cost_usd"] == pytest.approx(24.0)
    assert out["cost_per_million_tokens_usd"] == pytest.approx(24.0 / 1.1)
    # Input and output shares add up to the GPU cost.
    split = out["cost_per_million_input_tokens_usd"] * 1.0 + out["cost_per_million_output_tokens_usd"] * 0.1
    assert split == pytest.approx(24.0)
    assert 0 < out["prefill_busy_share"] <= 1


def test_ttl_choice_judged_by_cost():
    """A 1-hour TTL pays 2x on writes; it is cheaper only if it turns enough recomputes into reads."""
    five_min = provider_bill_usd(read_tokens=700_000, write_tokens=300_000, output_tokens=0, ttl_s=300)
    one_hour_small_gain = provider_bill_usd(read_tokens=750_000, write_tokens=250_000, output_tokens=0, ttl_s=3600)
    one_hour_big_gain = provider_bill_usd(read_tokens=900_000, write_tokens=100_000, output_tokens=0, ttl_s=3600)
    assert one_hour_small_gain > five_min > one_hour_big_gain


def test_every_run_summary_has_economics(small_scenario_yaml):
    result = run_scenario(load_scenario(small_scenario_yaml, ["duration_s=1m"]))
    summary = result.summary
    for key in ("gpu_seconds", "gpu_cost_usd", "cost_per_million_input_tokens_usd", "cost_per_million_output_tokens_usd",
                "provider_bill_usd", "provider_cache_write_multiplier", "cache_read_tokens"):
        assert key in summary
    assert summary["gpu_cost_usd"] == pytest.approx(summary["gpu_seconds"] / 3600 * 6.0)
    input_cost = summary["cost_per_million_input_tokens_usd"] * (summary["cache_read_tokens"] + summary["cache_write_tokens"]) / 1e6
    output_tokens = result.tables["requests"].loc[~result.tables["requests"].rejected, "output_tokens"].sum()
    output_cost = summary["cost_per_million_output_tokens_usd"] * output_tokens / 1e6
    assert input_cost + output_cost == pytest.approx(summary["gpu_cost_usd"])
    assert summary["provider_bill_usd"] < summary["provider_bill_no_cache_usd"]  # the cache hits save money


def test_built_in_tier_kinds_are_priced_from_the_hardware_profile(small_scenario_yaml):
    """DRAM, disk and remote capacity cost their kind's price (the hardware profile's fields,
    cited in docs/experiments.md); HBM comes with the GPUs; a kind nobody registered has no
    price and is listed as charged at zero."""
    from agentsim.engine.economics import memory_cost
    from agentsim.hardware.tier_kinds import tier_price_usd_per_gb_month

    hw = load_scenario(small_scenario_yaml).hardware
    assert tier_price_usd_per_gb_month("dram", hw) == hw.dram_usd_per_gb_month == 0.53
    assert tier_price_usd_per_gb_month("disk", hw) == hw.nvme_usd_per_gb_month == 0.0092
    assert tier_price_usd_per_gb_month("remote", hw) == hw.remote_usd_per_gb_month == 0.023
    assert tier_price_usd_per_gb_month("hbm", hw) == 0.0
    assert tier_price_usd_per_gb_month("no_such_kind", hw) is None
    scenario = load_scenario(small_scenario_yaml)
    tiers = [{"name": "hbm", "capacity_bytes": 100e9}, {"name": "dram", "capacity_bytes": 730e9},
             {"name": "disk", "capacity_bytes": 7300e9}, {"name": "no_such_kind", "capacity_bytes": 1e12}]
    out = memory_cost(scenario, tiers, simulated_s=7200.0)
    instances = scenario.hardware.instances
    assert out["memory_usd_per_hour"] == pytest.approx(instances * (0.53 + 10 * 0.0092))
    assert out["memory_cost_by_tier_usd"] == pytest.approx({"dram": 2 * instances * 0.53, "disk": 2 * instances * 0.092,
                                                            "no_such_kind": 0.0})
    assert out["memory_unpriced_tiers"] == ["no_such_kind"]
