"""The ``serving`` section: engine, step timing, parallelism and precision, batching caps,
router, KV admission and preemption, disaggregation and prefill-ahead."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentsim.config.base import PolicyRef, Strict
from agentsim.config.disaggregation import DisaggregationConfig
from agentsim.errors import FieldError

#: aiconfigurator's default MTP acceptance per draft position (``DEFAULT_NEXTN_ACCEPT_RATES`` of
#: its planners and of Dynamo's, applied when no acceptance is measured).
DEFAULT_ACCEPT_RATES = (0.85, 0.3, 0.0, 0.0, 0.0)


class Parallelism(Strict):
    """How one instance's GPUs split the model (``tp * pp * attention_dp`` = GPUs per instance).

    For MoE models the experts are split ``moe_tp * moe_ep = tp * attention_dp`` ways; absent
    values default to tensor parallelism for dense layers and expert parallelism for experts."""

    tp: int | None = Field(None, gt=0, description="tensor-parallel degree (absent: GPUs per instance / (pp * attention_dp))")
    pp: int = Field(1, gt=0, description="pipeline-parallel stages")
    attention_dp: int = Field(1, gt=0, description="attention data-parallel ranks (each serves a share of the sequences)")
    moe_tp: int | None = Field(None, gt=0, description="tensor-parallel degree inside each expert")
    moe_ep: int | None = Field(None, gt=0, description="expert-parallel degree")

    def moe_split_problem(self, gpus: int) -> tuple[str, str] | None:
        """(field, why) when ``moe_tp`` / ``moe_ep`` cannot split the experts of an MoE model
        served on ``gpus`` GPUs: both given, their product must be ``tp * attention_dp`` (the
        engines' rule: aiconfigurator-core refuses any other); one given, it must divide that."""
        tp = self.tp if self.tp is not None else max(1, gpus // (self.pp * self.attention_dp))
        width = tp * self.attention_dp
        if self.moe_tp is not None and self.moe_ep is not None:
            if self.moe_tp * self.moe_ep != width:
                return "moe_ep", (f"moe_tp {self.moe_tp} x moe_ep {self.moe_ep} must equal tp {tp} x attention_dp "
                                  f"{self.attention_dp} ({width}): the experts are split over the same GPUs")
            return None
        for name in ("moe_ep", "moe_tp"):
            value = getattr(self, name)
            if value is not None and width % value:
                return name, f"{name} {value} must divide tp {tp} x attention_dp {self.attention_dp} ({width})"
        return None


class Precision(Strict):
    """Numeric formats, in aiconfigurator-core's names (absent: the model's published format)."""

    weights: str | None = Field(None, description="dense-layer GEMMs: bfloat16, fp8, fp8_block, nvfp4, int4_wo")
    moe: str | None = Field(None, description="expert GEMMs: bfloat16, fp8, fp8_block, nvfp4, int4_wo, w4a16_mxfp4")
    kv_cache: str | None = Field(None, description="KV cache: bfloat16, fp8")
    attention: str | None = Field(None, description="attention kernels: bfloat16, fp8")


class SpeculativeDecoding(Strict):
    """Multi-token prediction (DeepSeek's MTP layers): each decode iteration drafts
    ``draft_tokens`` tokens per sequence and verifies them (agentsim.hardware.timing.speculative)."""

    draft_tokens: int = Field(..., gt=0, le=5, description="MTP draft tokens per iteration (TensorRT-LLM "
                              "num_nextn_predict_layers, SGLang speculative-num-steps)")
    accept_rates: list[float] = Field(default_factory=lambda: list(DEFAULT_ACCEPT_RATES), min_length=1, max_length=5,
                                      description="chance each draft position is accepted when the earlier ones were "
                                                  "(default: aiconfigurator's 0.85, 0.3, 0, 0, 0)")

    @model_validator(mode="after")
    def _rates(self):
        for index, rate in enumerate(self.accept_rates):
            if not 0.0 <= rate <= 1.0:
                raise FieldError(("accept_rates", index), f"an acceptance rate is a share in [0, 1], not {rate:g}")
        return self


class ServingConfig(Strict):
    max_batch_requests: int = Field(128, gt=0, description="most requests in one running batch (engine name: max_num_seqs)")
    prefill_chunk_tokens: int = Field(8192, gt=0, description="chunked prefill: token budget per iteration (engine name: max_num_batched_tokens)")
    engine: Literal["vllm", "sglang", "trtllm"] = Field(
        "vllm", description="serving engine whose kernels (measured timing) and scheduler (KV admission, preemption) are modelled")
    engine_version: str | None = Field(None, description="engine version in the timing databases (absent: the newest complete one)")
    timing: Literal["auto", "measured", "roofline"] = Field(
        "auto", description="step timing: measured (aiconfigurator-core databases; error if they lack the deployment), "
                            "roofline, or auto (measured where available, else roofline; the summary says which and why)")
    parallelism: Parallelism = Field(default_factory=Parallelism)
    precision: Precision = Field(default_factory=Precision)
    router: str = Field("kv_aware", description="how requests pick an instance: kv_aware (Dynamo), cache_aware (SGLang), "
                        "session_affinity, least_loaded, round_robin (see `agentsim policies`, docs/routing.md)")
    router_params: dict[str, Any] = Field(default_factory=dict, description="the router's parameters (its Params; see `agentsim policies`)")
    sticky_sessions: bool = Field(False, description="send every call of a session to the instance that served its first call")
    prefill_ahead: PolicyRef = Field(default_factory=lambda: PolicyRef(name="none"),
                                     description="prefill a session's tool output during the tool gap, ahead of its next call: "
                                                 "none, or streamed with params chunks, pin, min_tokens (docs/prefill-ahead.md)")
    # --- engine-style KV admission (agentsim.cluster.serving.kv_admission) -----------------------
    kv_admission: Literal["vllm", "sglang", "trtllm", "reserve_full"] | None = Field(
        None, description="KV admission rule; default: the engine's (reserve_full: every prompt and output block reserved at admission, never preempted)")
    preemption: Literal["recompute", "swap"] = Field("recompute", description="vllm rule: a preempted request's KV is dropped and recomputed, or swapped to the DRAM tier")
    init_new_token_ratio: float = Field(0.7, gt=0, le=1, description="sglang rule: share of the running requests' remaining output reserved, at start and after a retraction")
    min_new_token_ratio: float = Field(0.1, gt=0, le=1, description="sglang rule: the share decays to this")
    new_token_ratio_decay: float = Field(0.001, ge=0, description="sglang rule: decay of the share per decode step")
    max_num_seqs: int | None = Field(None, gt=0, description="engine name for max_batch_requests (overrides it when set)")
    max_num_batched_tokens: int | None = Field(None, gt=0, description="engine name for prefill_chunk_tokens (overrides it when set)")
    disaggregation: DisaggregationConfig | None = Field(
        None, description="separate prefill and decode pools, KV handed over on the topology's links (absent: aggregated)")
    mixed_prefill: bool | None = Field(
        None, description="prefill chunks share an iteration with the decoding requests (vLLM and TensorRT-LLM "
                          "chunked prefill), or run as prefill-only batches while decode waits (SGLang, whose "
                          "enable_mixed_chunk is off by default); absent: the engine's")
    long_prefill_token_threshold: int | None = Field(
        None, gt=0, description="most tokens one prefilling request takes of an iteration's budget while another request "
                                "is prefilling too, so a short prompt is not held behind a long cold one (vLLM's "
                                "long_prefill_token_threshold with partial prefills); absent: chunks first come first served")
    schedule_ahead: bool | None = Field(
        None, description="the scheduler forms each step while the one before runs (vLLM's async scheduling, SGLang's "
                          "overlap schedule, TensorRT-LLM's overlap scheduler), so a request arriving during a step "
                          "joins the step after next; absent: the engine's (on for all three)")
    scheduler_recv_interval: int = Field(
        1, gt=0, le=10000, description="sglang: the scheduler takes new requests only every N decode steps (at once after a "
                                      "prefill batch or when idle; SGLang's --scheduler-recv-interval, default 1)")

    adp_balance_timeout_iters: int | None = Field(
        None, gt=0, le=10000, description="trtllm with attention DP: context requests wait until every attention-DP rank has "
                                          "one, at most this many iterations (TensorRT-LLM's attention_dp_config enable_balance "
                                          "with timeout_iters); absent: scheduled as they come")
    batch_wait_timeout_iters: int | None = Field(
        None, gt=0, le=10000, description="trtllm without attention DP: while requests decode, hold new context requests "
                                          "at most this many iterations until their prompt tokens (plus one per decoding "
                                          "request) reach batch_wait_max_tokens_ratio of max_num_batched_tokens "
                                          "(TensorRT-LLM's batch_wait_timeout_iters); absent: scheduled as they come")
    batch_wait_max_tokens_ratio: float | None = Field(
        None, gt=0, le=1, description="trtllm: the share of the iteration's token budget that releases the context "
                                      "requests batch_wait_timeout_iters holds (TensorRT-LLM's batch_wait_max_tokens_ratio)")
    speculative_decoding: SpeculativeDecoding | None = Field(
        None, description="multi-token prediction on the decode steps (absent: one token per step)")
    prefill_host_s_per_layer: float | None = Field(
        None, ge=0, le=0.1, description="host seconds per layer that an iteration with a prefill chunk adds to its kernels "
                                        "(eager launches, MoE host synchronisation; per-kernel timing does not see them); "
                                        "absent: the engine's calibrated figure for the model's kind "
                                        "(agentsim.hardware.timing.prefill_host)")

    @field_validator("engine_version", mode="before")
    @classmethod
    def _version_is_text(cls, value):
        # YAML reads 0.10 as the number 0.1: a version must be written as text.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"engine_version must be text: write it in quotes ('{value}'), since YAML reads "
                             "an unquoted version as a number and drops digits (0.10 becomes 0.1)")
        return value

    @model_validator(mode="after")
    def _ratios(self):
        if self.min_new_token_ratio > self.init_new_token_ratio:
            raise FieldError(("min_new_token_ratio",), f"min_new_token_ratio ({self.min_new_token_ratio:g}) exceeds "
                             f"init_new_token_ratio ({self.init_new_token_ratio:g})")
        for name, is_set, engine, label in (
                ("scheduler_recv_interval", self.scheduler_recv_interval > 1, "sglang", "an SGLang"),
                ("adp_balance_timeout_iters", self.adp_balance_timeout_iters is not None, "trtllm", "a TensorRT-LLM"),
                ("batch_wait_timeout_iters", self.batch_wait_timeout_iters is not None, "trtllm", "a TensorRT-LLM"),
                ("batch_wait_max_tokens_ratio", self.batch_wait_max_tokens_ratio is not None, "trtllm",
                 "a TensorRT-LLM")):
            if is_set and self.engine != engine:
                raise FieldError((name,), f"{name} is {label} option; engine is {self.engine}")
        if (self.batch_wait_timeout_iters is None) != (self.batch_wait_max_tokens_ratio is None):
            given, missing = (("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio")
                              if self.batch_wait_max_tokens_ratio is None else
                              ("batch_wait_max_tokens_ratio", "batch_wait_timeout_iters"))
            raise FieldError((missing,), f"{given} is set without {missing}: TensorRT-LLM holds context requests "
                                         "only with both (a zero of either releases them at once)")
        return self

    def kv_admission_rule(self) -> str:
        """The KV admission rule in force: ``kv_admission``, else the engine's own."""
        return self.kv_admission or self.engine

    def mixes_prefill(self) -> bool:
        """Whether prefill chunks and decode steps share iterations (``mixed_prefill``, else the
        engine's default: SGLang runs prefill batches apart from decode batches)."""
        return self.mixed_prefill if self.mixed_prefill is not None else self.engine != "sglang"

    def schedules_ahead(self) -> bool:
        """Whether the scheduler runs one step ahead (``schedule_ahead``, else the engine's
        default: vLLM, SGLang and TensorRT-LLM all do; agentsim.cluster.serving.step_ahead)."""
        return self.schedule_ahead if self.schedule_ahead is not None else True

    def batch_requests(self) -> int:
        """Most requests in one batch (``max_num_seqs`` over ``max_batch_requests``)."""
        return self.max_num_seqs or self.max_batch_requests

    def batch_tokens(self) -> int:
        """Token budget per iteration (``max_num_batched_tokens`` over ``prefill_chunk_tokens``)."""
        return self.max_num_batched_tokens or self.prefill_chunk_tokens

    def instance_batch_tokens(self) -> int:
        """Token budget of one instance's iteration: :meth:`batch_tokens` per attention-DP rank.
        With attention DP every rank schedules its own batch under the engine's budget
        (SGLang's ``chunked_prefill_size``, TensorRT-LLM's ``max_num_tokens``), so the instance
        takes ``attention_dp`` times it, one request's chunk at most :meth:`batch_tokens`."""
        return self.batch_tokens() * self.parallelism.attention_dp

    def rank_chunk_tokens(self) -> int | None:
        """Most tokens of one request in one iteration when that is below the instance's budget
        (attention DP: a request's chunk runs on its rank), else None."""
        return self.batch_tokens() if self.parallelism.attention_dp > 1 else None
