"""A policy's run constants: parameters that describe the run, not the policy's choices.

Some policies price blocks with constants of the run they are in: GDSF's recompute cost needs
the tokens per block and the model's active parameters, attention coefficient and KV bytes
per token. Their ``Params`` carry defaults (the packaged DeepSeek-V3 on 64-token blocks) so a
policy can be built on its own, but inside a run those defaults would be wrong whenever the
run differs (Mooncake's 512-token blocks, another model). So the composition root passes the
run's values, and every field a policy's ``Params`` declares under one of these names, and
the user did not set, takes the run's value. A value the user set explicitly wins.
"""

from __future__ import annotations

from typing import Any, Mapping

#: The run constants a policy may declare (field name -> what it is).
RUN_CONSTANTS = {
    "block_tokens": "tokens per cache block (the trace's or the scenario's cache.block_tokens)",
    "kv_bytes_per_token": "the model's KV bytes per token",
    "active_params": "the model's parameters active per token",
    "attn_coeff": "the model's attention coefficient (sum over layers of heads x (d_qk + d_v))",
}


def with_run_constants(params_model, params: Mapping[str, Any] | None, constants: Mapping[str, Any]) -> dict:
    """``params`` plus every run constant in ``constants`` that ``params_model`` declares and
    ``params`` does not set (``params_model`` None: the policy has no parameters)."""
    out = dict(params or {})
    if params_model is None:
        return out
    fields = params_model.model_fields
    for name, value in constants.items():
        if name in RUN_CONSTANTS and name in fields and name not in out and value is not None:
            out[name] = value
    return out


def create_policy(registry, name: str, params: Mapping[str, Any] | None, constants: Mapping[str, Any]):
    """A new ``name`` policy from ``registry`` with ``params`` completed by the run's ``constants``."""
    return registry.create(name, with_run_constants(registry.params_model(name), params, constants))
