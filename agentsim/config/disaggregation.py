"""``serving.disaggregation``: separate prefill and decode pools (disaggregated serving).

Each pool has its worker count, GPUs per worker, parallelism and engine caps, as a Dynamo or
SGLang PD deployment configures its prefill and decode workers separately. Absent, serving is
aggregated (every instance prefills and decodes). See docs/disaggregation.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentsim.config.units import Bytes
from agentsim.errors import FieldError


class PoolParallelism(BaseModel):
    """How one worker's GPUs split the model (as ``serving.parallelism``; absent: TP over its GPUs)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    tp: int | None = Field(None, gt=0, description="tensor-parallel degree (absent: GPUs per worker / (pp * attention_dp))")
    pp: int = Field(1, gt=0, description="pipeline-parallel stages")
    attention_dp: int = Field(1, gt=0, description="attention data-parallel ranks")
    moe_tp: int | None = Field(None, gt=0, description="tensor-parallel degree inside each expert")
    moe_ep: int | None = Field(None, gt=0, description="expert-parallel degree")


class PoolConfig(BaseModel):
    """One pool of identical workers (prefill or decode)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    workers: int = Field(1, gt=0, description="workers in the pool")
    gpus_per_worker: int | None = Field(None, gt=0, description="GPUs of one worker (absent: hardware.gpus_per_instance)")
    parallelism: PoolParallelism = Field(default_factory=PoolParallelism)
    max_num_seqs: int | None = Field(None, gt=0, description="most requests in one worker's batch (absent: serving's)")
    max_num_batched_tokens: int | None = Field(None, gt=0, description="token budget per iteration (absent: serving's)")
    kv_capacity_bytes: Bytes | None = Field(None, gt=0, description="HBM bytes for KV per worker (absent: HBM minus weights minus reserve)")


class DisaggregationConfig(BaseModel):
    """Prefill workers compute prompts and hand their KV to decode workers over the topology's
    links: NVLink inside an NVLink domain, the NICs (RDMA) between domains."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    prefill: PoolConfig = Field(default_factory=PoolConfig, description="the prefill pool")
    decode: PoolConfig = Field(default_factory=PoolConfig, description="the decode pool")
    decode_router: str | None = Field(None, description="router over the decode pool (absent: serving.router); "
                                      "the prefill pool always uses serving.router")
    decode_router_params: dict[str, Any] = Field(default_factory=dict, description="the decode router's parameters "
                                                 "(absent with decode_router absent: serving.router_params)")
    decode_first: bool | None = Field(None, description="the decode worker reserves a call's batch slot and KV before "
                                      "its prefill starts (SGLang's prealloc queue and bootstrap handshake); false: "
                                      "prefill first, then a decode worker is picked (Dynamo with TensorRT-LLM or vLLM); "
                                      "absent: true for engine sglang")
    transfer_efficiency: float = Field(0.8, gt=0, le=1, description="share of a link's bandwidth a KV hand-off "
                                       "achieves (NIXL/Mooncake transfer engines reach 70-90%)")


def pool_scenario(scenario, role: str):
    """The scenario as one pool's workers see it: ``hardware.instances`` = the pool's workers,
    its GPUs, parallelism, engine caps and KV capacity in place of the aggregated ones.

    KV capacity: the pool's ``kv_capacity_bytes``; else ``hardware.kv_capacity_bytes`` when the
    pool's workers have ``hardware.gpus_per_instance`` GPUs (it is per instance); else HBM minus
    weights minus the reserve, on the pool's GPUs."""
    pool: PoolConfig = getattr(scenario.serving.disaggregation, role)
    hw = scenario.hardware
    gpus = pool.gpus_per_worker or hw.gpus_per_instance
    kv_bytes = pool.kv_capacity_bytes
    if kv_bytes is None and gpus == hw.gpus_per_instance:
        kv_bytes = hw.kv_capacity_bytes
    serving = scenario.serving
    parallelism = serving.parallelism.model_copy(update=pool.parallelism.model_dump())
    routing = {}
    if role == "decode" and scenario.serving.disaggregation.decode_router is not None:
        routing = {"router": scenario.serving.disaggregation.decode_router,
                   "router_params": scenario.serving.disaggregation.decode_router_params}
    pool_serving = serving.model_copy(update={**routing,
        "parallelism": parallelism, "disaggregation": None,
        "max_num_seqs": pool.max_num_seqs or serving.batch_requests(),
        "max_num_batched_tokens": pool.max_num_batched_tokens or serving.batch_tokens()})
    pool_hw = hw.model_copy(update={"gpus_per_instance": gpus, "instances": pool.workers, "kv_capacity_bytes": kv_bytes})
    return scenario.model_copy(update={"hardware": pool_hw, "serving": pool_serving})


def check_pools(scenario) -> None:
    """Cross-checks of ``serving.disaggregation`` against the rest of the scenario (FieldError)."""
    tiers = scenario.cache.tiers
    if tiers is not None and tiers.peer_hbm:
        raise FieldError(("cache", "tiers", "peer_hbm"), "peer-HBM hits are not modelled with disaggregated "
                         "serving (a decode worker receives its KV from the prefill worker): remove one of them")
    if scenario.serving.sticky_sessions:
        raise FieldError(("serving", "disaggregation"), "serving.sticky_sessions is not supported with disaggregation")
    weights_bytes = scenario.weights_bytes()
    block_bytes = scenario.cache.block_tokens * scenario.model.kv_bytes_per_token
    for role in ("prefill", "decode"):
        pool = pool_scenario(scenario, role)
        hw = pool.hardware
        par = getattr(scenario.serving.disaggregation, role).parallelism
        gpus = hw.gpus_per_instance
        if par.tp is not None and par.tp * par.pp * par.attention_dp != gpus:
            raise FieldError(("serving", "disaggregation", role, "parallelism", "tp"),
                             f"tp {par.tp} x pp {par.pp} x attention_dp {par.attention_dp} must equal the "
                             f"{role} workers' GPUs ({gpus})")
        if par.tp is None and gpus % (par.pp * par.attention_dp):
            raise FieldError(("serving", "disaggregation", role, "parallelism", "pp"),
                             f"pp {par.pp} x attention_dp {par.attention_dp} must divide the {role} workers' GPUs ({gpus})")
        if scenario.model.is_moe() and (problem := pool.serving.parallelism.moe_split_problem(gpus)) is not None:
            raise FieldError(("serving", "disaggregation", role, "parallelism", problem[0]), problem[1])
        if (problem := scenario.hardware.instance_span_problem(gpus)) is not None:
            raise FieldError(("serving", "disaggregation", role, "gpus_per_worker"), problem)
        where = ("serving", "disaggregation", role, "gpus_per_worker")
        if hw.kv_capacity_bytes is None:
            free = hw.hbm_bytes_per_gpu * hw.gpus_per_instance * (1 - hw.hbm_reserve_fraction) - weights_bytes
            if free < block_bytes:
                raise FieldError(where, f"model weights ({weights_bytes / 1e9:.0f} GB) leave no KV room in "
                                        f"{hw.gpus_per_instance} GPUs' HBM: add GPUs or set kv_capacity_bytes")
        elif hw.kv_capacity_bytes > hw.hbm_bytes_per_gpu * hw.gpus_per_instance:
            raise FieldError(("serving", "disaggregation", role, "kv_capacity_bytes"),
                             f"{hw.kv_capacity_bytes / 1e9:.0f} GB of KV exceeds a worker's HBM "
                             f"({hw.hbm_bytes_per_gpu * hw.gpus_per_instance / 1e9:.0f} GB)")
