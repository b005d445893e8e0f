"""Invariant mode over a generated space of scenarios: policies x tiers x inclusive/exclusive x
prefetch x demote on tool calls.

Each example is a tiny scenario (a few sessions for a few simulated seconds, under enough cache
pressure that blocks move between tiers) run with ``run.check_invariants``: the cache's
invariants (capacity per tier, pins, tree structure, single residency in exclusive tiers) after
every event and token conservation per finished request. Hypothesis draws the combinations; a
failing one shrinks to the smallest scenario that breaks an invariant. CI runs
:data:`CI_EXAMPLES` examples; the slow test runs many more (``AGENTSIM_INVARIANT_EXAMPLES``).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import Simulation

CI_EXAMPLES = 200
SLOW_EXAMPLES = int(os.environ.get("AGENTSIM_INVARIANT_EXAMPLES", "1500"))

#: Eviction policies that work in any tier without a future (belady needs an offline trace).
HBM_POLICIES = ["lru", "fifo", "s3fifo", "sieve", "slru", "arc", "twoq", "lfu", "gdsf", "tlru", "w_tinylfu",
                "ttl_pin", "ttl_5m", "continuum", "infercept", "kvflow", "belady_oracle"]
TIER_POLICIES = ["lru", "fifo", "s3fifo", "sieve", "slru", "arc", "lfu", "ttl_5m", "gdsf"]


@st.composite
def scenarios(draw) -> dict:
    tiers: dict = {}
    depth = draw(st.sampled_from(["none", "dram", "dram+disk"]))
    if depth != "none":
        inclusive = draw(st.booleans())
        tiers["dram"] = {"capacity_bytes": draw(st.sampled_from(["0.3GB", "1GB", "4GB"])),
                         "eviction": draw(st.sampled_from(TIER_POLICIES)),
                         "inclusive": inclusive,  # an exclusive tier must be write_back
                         "write_policy": draw(st.sampled_from(["write_back", "write_through"])) if inclusive else "write_back"}
        tiers["on_tool_call"] = draw(st.sampled_from(["keep", "demote"]))
    if depth == "dram+disk":
        tiers["disk"] = {"capacity_bytes": draw(st.sampled_from(["1GB", "8GB"])),
                         "eviction": draw(st.sampled_from(TIER_POLICIES)),
                         "inclusive": draw(st.booleans())}
        tiers["prefetch"] = {"policy": draw(st.sampled_from(["none", "best_effort", "wait_complete", "timeout"]))}
    cache = {"block_tokens": 64, "eviction": draw(st.sampled_from(HBM_POLICIES))}
    if tiers:
        cache["tiers"] = tiers
    return {
        "name": "invariant-space",
        "seed": draw(st.integers(0, 2**16)),
        "duration_s": draw(st.sampled_from([4, 8, 12])),
        "hardware": {"profile": "gb300_nvl72", "gpus_per_instance": 4,
                     "instances": draw(st.sampled_from([1, 1, 2])),
                     "kv_capacity_bytes": draw(st.sampled_from(["0.15GB", "0.3GB", "1GB"]))},
        "model": {"profile": "deepseek_v3"},
        "cache": cache,
        "serving": {"max_batch_requests": draw(st.sampled_from([2, 4, 8])), "prefill_chunk_tokens": 4096},
        "workload": {
            "global_system_prompt_tokens": 500,
            "agent_classes": {"coding": {
                "arrival": {"kind": "population", "concurrent": draw(st.integers(1, 3)), "ramp_s": 1},
                "tools_prefix_tokens": 1000,
                "initial_context_tokens": {"dist": "lognormal", "median": 1500, "sigma": 0.5, "round": True},
                "calls_per_session": {"dist": "lognormal", "median": 4, "sigma": 0.5, "min": 1, "round": True},
                "tool_gap_s": {"dist": "lognormal", "median": 0.5, "sigma": 1.0},
                "human_turn_probability": 0.2,
                "human_gap_s": {"dist": "exponential", "mean": 3},
                "appended_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.8, "round": True},
                "output_tokens": {"dist": "lognormal", "median": 40, "sigma": 0.7, "min": 1, "round": True},
                "subagents": {"probability": draw(st.sampled_from([0.0, 0.3])), "fanout": 2, "calls": 2},
            }},
        },
        "run": {"check_invariants": True},
    }


def _regression(eviction: str, dram: dict, disk: dict | None, seed: int, **tiers) -> dict:
    """A scenario of the space with the given cache (for the regression cases below)."""
    base = {
        "name": "invariant-regression", "seed": seed, "duration_s": 12,
        "hardware": {"profile": "gb300_nvl72", "gpus_per_instance": 4, "instances": 2, "kv_capacity_bytes": "0.15GB"},
        "model": {"profile": "deepseek_v3"},
        "cache": {"block_tokens": 64, "eviction": eviction, "tiers": {"dram": dram, **tiers}},
        "serving": {"max_batch_requests": 4, "prefill_chunk_tokens": 4096},
        "workload": {"global_system_prompt_tokens": 500, "agent_classes": {"coding": {
            "arrival": {"kind": "population", "concurrent": 4, "ramp_s": 1}, "tools_prefix_tokens": 1000,
            "initial_context_tokens": {"dist": "lognormal", "median": 1500, "sigma": 0.5, "round": True},
            "calls_per_session": {"dist": "lognormal", "median": 4, "sigma": 0.5, "min": 1, "round": True},
            "tool_gap_s": {"dist": "lognormal", "median": 0.5, "sigma": 1.0}, "human_turn_probability": 0.2,
            "human_gap_s": {"dist": "exponential", "mean": 3},
            "appended_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.8, "round": True},
            "output_tokens": {"dist": "lognormal", "median": 40, "sigma": 0.7, "min": 1, "round": True}}}},
        "run": {"check_invariants": True},
    }
    if disk is not None:
        base["cache"]["tiers"]["disk"] = disk
    return base


def test_exclusive_disk_gets_no_copy_of_a_block_hbm_still_holds():
    """Regression: a DRAM victim still resident in HBM was demoted into an exclusive disk tier,
    leaving HBM and disk both holding it ("resident in an exclusive tier and another tier")."""
    _run(_regression("kvflow", {"capacity_bytes": "0.3GB", "eviction": "arc", "inclusive": True,
                                "write_policy": "write_through"},
                     {"capacity_bytes": "1GB", "eviction": "fifo", "inclusive": False}, seed=1,
                     on_tool_call="demote", prefetch={"policy": "timeout"}))


@pytest.mark.parametrize("eviction", ["s3fifo", "ttl_pin"])
def test_exclusive_dram_under_pressure_with_demote(eviction):
    """The issue's two reports: s3fifo in HBM over an exclusive DRAM tier, and ttl_pin over an
    exclusive DRAM plus disk with demotion on tool calls."""
    disk = {"capacity_bytes": "1GB", "eviction": "lru", "inclusive": True} if eviction == "ttl_pin" else None
    for seed in range(3):
        _run(_regression(eviction, {"capacity_bytes": "0.3GB", "eviction": "lru", "inclusive": False,
                                    "write_policy": "write_back"}, disk, seed=seed, on_tool_call="demote"))


def test_exclusive_dram_takes_no_copy_of_a_block_an_inclusive_disk_holds():
    """Regression: an HBM victim already on an inclusive disk tier (it had been loaded back
    from there) was demoted into the exclusive DRAM tier as well, leaving DRAM and disk both
    holding it (lru HBM 0.3GB, exclusive DRAM 0.3GB, inclusive disk 1GB, 3 agents, seed 0)."""
    data = _regression("lru", {"capacity_bytes": "0.3GB", "eviction": "lru", "inclusive": False,
                               "write_policy": "write_back"},
                       {"capacity_bytes": "1GB", "eviction": "lru", "inclusive": True}, seed=0)
    data["hardware"].update(instances=1, kv_capacity_bytes="0.3GB")
    data["workload"]["agent_classes"]["coding"]["arrival"]["concurrent"] = 3
    data["duration_s"], data["serving"]["max_batch_requests"] = 8, 2
    _run(data)


@pytest.mark.parametrize("prefetch,on_tool_call", [("none", "keep"), ("none", "demote"), ("wait_complete", "keep")])
def test_exclusive_dram_over_inclusive_disk_keeps_one_copy(prefetch, on_tool_call):
    """Regression, the hypothesis space's failing case (lru HBM 0.3GB, exclusive DRAM 0.3GB,
    inclusive disk 1GB, 3 agents, seed 64), once per way a block reached two tiers: an HBM
    victim loaded from the disk demoted into DRAM too ("during kv_arrived"), the tool-gap swap
    of such a block, and a prefetch's staged DRAM copy beside the disk's."""
    data = _regression("lru", {"capacity_bytes": "0.3GB", "eviction": "lru", "inclusive": False,
                               "write_policy": "write_back"},
                       {"capacity_bytes": "1GB", "eviction": "lru", "inclusive": True}, seed=64,
                       on_tool_call=on_tool_call, prefetch={"policy": prefetch})
    data["hardware"].update(instances=1, kv_capacity_bytes="0.3GB")
    data["workload"]["agent_classes"]["coding"]["arrival"]["concurrent"] = 3
    data["duration_s"] = 8
    _run(data)


#: Simulated seconds past ``duration_s`` after which an example counts as stuck: its sessions'
#: last calls take well under a minute, and a request that never gets scheduled is cut there by
#: the run's drain limit (``limits.max_drain_s``, agentsim/engine/drain.py).
DRAIN_LIMIT_S = 600.0


def test_idle_instance_ends_prefetches_whose_pins_hold_the_hbm_its_head_request_needs():
    """Regression (found by the space, seed 373): two finished prefetches of requests queued
    behind the head one pinned the HBM copies of their paths until their own admission, the
    head request could not get HBM room with nothing running, and the run never ended."""
    data = _regression("lru", {"capacity_bytes": "0.3GB", "eviction": "fifo", "inclusive": False,
                               "write_policy": "write_back"},
                       {"capacity_bytes": "8GB", "eviction": "sieve", "inclusive": True}, seed=373,
                       on_tool_call="keep", prefetch={"policy": "timeout"})
    data["hardware"].update(instances=1, kv_capacity_bytes="0.3GB")
    data["serving"]["max_batch_requests"] = 2
    coding = data["workload"]["agent_classes"]["coding"]
    coding["arrival"]["concurrent"] = 3
    coding["subagents"] = {"probability": 0.3, "fanout": 2, "calls": 2}
    _run(data)


def _run(data: dict) -> None:
    data = {**data, "limits": {"max_drain_s": DRAIN_LIMIT_S}}
    scenario = scenario_from_dict(data, source="<invariant-space>")
    summary = Simulation(scenario).run().summary
    assert summary["calls_cut_at_drain_limit"] == 0, f"stuck: calls still in flight at t={summary['simulated_s']:.0f} s"
    assert summary["requests"] > 0, "the scenario must exercise the cache"


@settings(max_examples=CI_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=scenarios())
def test_invariants_hold_across_policies_and_tiers(data):
    _run(data)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=scenarios())
def test_invariants_hold_across_policies_and_tiers_many(data):
    _run(data)
