"""Eviction policies of a simulated run, built with the run's constants.

Every cache of a run gets its policy here, so a policy that prices blocks with the block size
or the model (GDSF) sees the scenario's values, not its packaged defaults
(:mod:`agentsim.cache.run_constants`).
"""

from __future__ import annotations

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.run_constants import create_policy


def scenario_constants(scenario, block_tokens: int | None = None) -> dict:
    """The run constants of ``scenario`` (``block_tokens`` overrides the cache's, for a pool)."""
    model = scenario.model
    return {
        "block_tokens": block_tokens if block_tokens is not None else scenario.cache.block_tokens,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "active_params": model.active_params,
        "attn_coeff": model.attn_coeff,
    }


def eviction_policy(ref, scenario, block_tokens: int | None = None):
    """A new policy for the eviction reference ``ref`` (``name``, ``params``) of ``scenario``."""
    return create_policy(EVICTION_POLICIES, ref.name, ref.params, scenario_constants(scenario, block_tokens))
