"""The scenario schema: pydantic models for every section of a scenario YAML file.

Models are inert (no I/O in validators). Unknown keys are rejected (``extra="forbid"``); the
loader turns pydantic errors into one message with the YAML path, the line and a did-you-mean.
Quantities with units are parsed once here (see :mod:`agentsim.config.units`), so every field
holds plain SI numbers and says its unit in its name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentsim.config.limits import Limits, check_limits
from agentsim.config.units import Bytes, BytesPerSecond, Count, FlopsPerSecond, Seconds
from agentsim.errors import FieldError, did_you_mean
from agentsim.config.disaggregation import DisaggregationConfig, check_pools  # noqa: F401
from agentsim.config.base import PolicyRef, Strict  # noqa: F401  (re-exported: the scenario's parts)
from agentsim.config.serving import Parallelism, Precision, ServingConfig  # noqa: F401  (re-exported)
from agentsim.config.weights import weights_bytes
from agentsim.config.workload import (  # noqa: F401  (re-exported: the scenario's parts)
    AgentClass, Arrival, Burst, Compaction, Edits, SubAgents, WorkloadConfig)


def check_output_name(value: str) -> str:
    """``value`` if it can name a directory under ``runs/``; ValueError otherwise.

    The default output directory is ``runs/<name>``: a name with a path separator, ``..`` or
    an absolute path would write outside ``runs/`` (``name: ../x`` or ``/etc``), so a name is
    one plain path component. ``--out`` chooses any other place on purpose."""
    if not value.strip():
        raise ValueError("name must not be empty")
    if "/" in value or "\\" in value or "\x00" in value or value.strip() in (".", ".."):
        raise ValueError(f"name {value!r} must be a plain name (no '/', '\\', '..'): it names the directory "
                         "under runs/ (use --out to write elsewhere)")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"name {value!r} holds a control character: it names the directory under runs/")
    # 255 bytes is the file-name limit of common file systems; the staging sibling
    # (`.NAME.tmp-XXXXXXXX`) and the lock (`.NAME.lock`) add up to 20 bytes to it.
    if len(value.encode("utf-8", "surrogatepass")) > _MAX_NAME_BYTES:
        raise ValueError(f"name of {len(value.encode('utf-8', 'surrogatepass')):,} bytes is longer than the "
                         f"{_MAX_NAME_BYTES} bytes a directory name under runs/ can take (use --out to choose the directory)")
    return value


_MAX_NAME_BYTES = 200


class HardwareConfig(Strict):
    """One serving instance: a group of GPUs with their HBM, compute and memory bandwidth."""

    profile: str | None = Field(None, description="hardware profile name (e.g. gb300_nvl72); explicit fields override it")
    system: str | None = Field(None, description="GPU system in the measured-timing databases (h100_sxm, h200_sxm, b200_sxm, "
                                                 "b300_sxm, gb200, gb300); absent: roofline timing")
    gpus_per_instance: int = Field(4, gt=0, description="GPUs in one serving instance (tensor/expert parallel group)")
    instances: int = Field(1, gt=0, description="serving instances in the cluster (all racks together)")
    racks: int = Field(1, gt=0, description="racks, each one NVLink domain, joined by the scale-out network (each GPU's NIC); "
                                            "the instances are split evenly between them and numbered rack by rack")
    hbm_bytes_per_gpu: Bytes = Field(279e9, gt=0, description="usable HBM per GPU")
    hbm_bandwidth_bytes_per_s: BytesPerSecond = Field(8e12, gt=0, description="HBM bandwidth per GPU")
    dense_flops_per_gpu: FlopsPerSecond = Field(5e15, gt=0, description="dense FP8 tensor FLOP/s per GPU")
    bf16_flops_per_gpu: FlopsPerSecond | None = Field(None, gt=0, description="dense BF16 tensor FLOP/s per GPU (absent: half the FP8 figure)")
    fp4_flops_per_gpu: FlopsPerSecond | None = Field(None, gt=0, description="dense FP4 tensor FLOP/s per GPU (absent: the FP8 figure, no FP4 units)")
    mfu_prefill: float = Field(0.35, gt=0, le=1, description="model FLOP utilisation during prefill")
    mbu_decode: float = Field(0.70, gt=0, le=1, description="memory bandwidth utilisation during decode")
    kv_capacity_bytes: Bytes | None = Field(None, gt=0, description="HBM bytes for KV per instance; derived from HBM minus weights minus reserve when absent")
    hbm_reserve_fraction: float = Field(0.10, ge=0, lt=1, description="HBM fraction kept for activations and workspace when deriving KV capacity")
    price_usd_per_gpu_hour: float = Field(6.0, ge=0, description="GPU-hour price for cost reports")
    # Memory below HBM, priced per GB-month of configured tier capacity (HBM is in the GPU price).
    # Sources and derivations: docs/experiments.md, "Memory prices".
    dram_usd_per_gb_month: float = Field(0.53, ge=0, description="DRAM tier capacity price, USD per GB-month ([derived] ~$19/GB server DDR5 amortised over 36 months)")
    nvme_usd_per_gb_month: float = Field(0.0092, ge=0, description="disk (NVMe) tier capacity price, USD per GB-month ([derived] ~$0.33/GB enterprise TLC SSD over 36 months)")
    remote_usd_per_gb_month: float = Field(0.023, ge=0, description="remote store capacity price, USD per GB-month ([secondhand] object storage list price; an assumption for a KV store)")
    # --- memory hierarchy and topology (used when cache.tiers enables lower tiers) -------------
    gpus_per_tray: int = Field(4, gt=0, description="GPUs per compute tray (they share the tray's NVMe drives)")
    gpus_per_cpu: int = Field(2, gt=0, description="GPUs sharing one host CPU and its DRAM (Grace: 2)")
    nvlink_domain_gpus: int = Field(72, gt=0, description="GPUs in one NVLink domain (peer-HBM hits stay inside it)")
    dram_bytes_per_gpu: Bytes = Field(240e9, ge=0, description="host DRAM per GPU (the CPU's DRAM divided by its GPUs)")
    h2d_bytes_per_s: BytesPerSecond = Field(150e9, gt=0, description="effective host-to-device copy bandwidth per GPU (DRAM -> HBM)")
    d2h_bytes_per_s: BytesPerSecond = Field(130e9, gt=0, description="effective device-to-host copy bandwidth per GPU (HBM -> DRAM)")
    nvlink_bytes_per_s: BytesPerSecond = Field(900e9, gt=0, description="NVLink bandwidth per GPU per direction")
    nvlink_latency_s: Seconds = Field(2e-6, ge=0, description="NVLink GPU-to-GPU transfer latency")
    transfer_setup_s: Seconds = Field(10e-6, ge=0, description="fixed setup cost per host<->device transfer (DMA launch)")
    nvme_drives_per_tray: int = Field(4, ge=0, description="local NVMe drives per tray")
    nvme_bytes_per_drive: Bytes = Field(3.84e12, ge=0, description="capacity of one NVMe drive")
    nvme_read_bytes_per_s_per_drive: BytesPerSecond = Field(6.5e9, gt=0, description="sequential read bandwidth of one drive")
    nvme_write_bytes_per_s_per_drive: BytesPerSecond = Field(3.5e9, gt=0, description="sequential write bandwidth of one drive")
    nvme_latency_s: Seconds = Field(80e-6, ge=0, description="NVMe read latency per transfer")
    nic_bytes_per_s: BytesPerSecond = Field(100e9, gt=0, description="scale-out NIC bandwidth per GPU per direction")
    rdma_latency_s: Seconds = Field(5e-6, ge=0, description="network (RDMA) latency per transfer")

    def instance_span_problem(self, gpus: int) -> str | None:
        """Why an instance (or disaggregated worker) of ``gpus`` GPUs cannot be placed, or None:
        one larger than an NVLink domain spans whole domains (multi-node instances are built of
        whole nodes: 16 or 64 GPUs of 8-GPU HGX nodes, never 12)."""
        domain = self.nvlink_domain_gpus
        if gpus > domain and gpus % domain:
            return (f"an instance of {gpus:,} GPUs spans {gpus / domain:.3g} NVLink domains of {domain} GPUs; "
                    f"one larger than a domain must span whole domains (a multiple of {domain} GPUs)")
        return None

    def racks_problem(self) -> FieldError | None:
        """Aggregated serving: the instances must split evenly between the racks and each rack's
        share fit its NVLink domain (a rack is one NVLink domain). Checked by the scenario, since
        with disaggregation the pools are placed instead (``serving.disaggregation``)."""
        if self.racks > 1:
            if self.instances % self.racks:
                noun = "instance does" if self.instances == 1 else "instances do"
                return FieldError(("hardware", "racks"), f"{self.instances} {noun} not split evenly between {self.racks} racks")
            rack_gpus = self.instances // self.racks * self.gpus_per_instance
            if rack_gpus > self.nvlink_domain_gpus:
                return FieldError(("hardware", "racks"), f"each of the {self.racks} racks would hold {rack_gpus} GPUs "
                                                         f"({self.instances // self.racks} instances x {self.gpus_per_instance}), more "
                                                         f"than its NVLink domain of {self.nvlink_domain_gpus} GPUs")
        return None


class ModelConfig(Strict):
    """The served model: what its KV costs and how much compute a token needs."""

    profile: str | None = Field(None, description="model profile name (e.g. deepseek_v3); explicit fields override it")
    kv_bytes_per_token: Bytes = Field(35136, ge=1, description="KV cache bytes per token (all layers; at least one byte)")
    active_params: Count = Field(37e9, gt=0, description="parameters active per token (MoE: active experts)")
    total_params: Count = Field(671e9, gt=0, description="all parameters (weight memory)")
    bytes_per_param: float = Field(1.0, gt=0, description="weight bytes per parameter (FP8 = 1)")
    attn_coeff: float = Field(2.5e6, ge=0, description="L*H*(d_qk+d_v) summed over layers, for prefill attention FLOPs")
    name: str | None = Field(None, description="Hugging Face model id (e.g. deepseek-ai/DeepSeek-V3): selects measured timing")
    decode_attn_coeff: float | None = Field(None, ge=0, description="decode attention FLOPs per context token / 2 (absorbed MLA: "
                                                                    "L*H*(2*d_latent+d_rope)); absent: attn_coeff")
    layers: int = Field(0, ge=0, description="transformer layers (roofline: tensor-parallel all-reduces per step)")
    hidden_size: int = Field(0, ge=0, description="model width (roofline: all-reduce bytes per token)")
    routed_experts: int = Field(0, ge=0, description="MoE routed experts per layer (0: dense)")
    experts_per_token: int = Field(0, ge=0, description="MoE experts each token is routed to")

    def is_moe(self) -> bool:
        """Whether the experts are split apart from the dense layers (routed experts, or fewer
        active parameters than total), as :func:`agentsim.hardware.timing.select.parallelism` reads it."""
        return bool(self.routed_experts) or self.active_params < self.total_params

    @model_validator(mode="after")
    def _active_le_total(self):
        if self.active_params > self.total_params:
            raise FieldError(("active_params",), f"active_params ({self.active_params:g}) exceeds total_params ({self.total_params:g})")
        return self


class TierConfig(Strict):
    """One tier below HBM (DRAM, disk or remote store) of every serving instance.

    ``write_policy`` says how blocks get here from the tier above: ``write_through`` copies a block
    as soon as it enters the tier above, ``write_through_selective`` once it has been hit
    ``write_through_hits`` times, ``write_back`` only when the tier above evicts it (demotion).
    ``inclusive`` keeps this tier's copy when a block is loaded back up; exclusive tiers free it,
    so a block is never resident in two tiers (exclusive requires ``write_back``).
    """

    enabled: bool = Field(True, description="set false to remove this tier (same scenario otherwise)")
    capacity_bytes: Bytes | None = Field(None, gt=0, description="capacity per serving instance (a shared remote store: the whole store); default from the hardware (DRAM and NVMe share per instance)")
    capacity_fraction: float = Field(0.8, gt=0, le=1, description="share of the hardware's DRAM/NVMe used for KV when capacity_bytes is absent")
    eviction: PolicyRef = Field(default_factory=PolicyRef, description="this tier's eviction policy (any registered policy)")
    write_policy: Literal["write_through", "write_through_selective", "write_back"] = "write_back"
    write_through_hits: int = Field(2, ge=1, description="write_through_selective: hits before a block is copied down")
    inclusive: bool = Field(True, description="keep this tier's copy when a block is loaded up (false: exclusive)")
    bandwidth_bytes_per_s: BytesPerSecond | None = Field(None, gt=0, description="remote store: aggregate bandwidth of the shared store")
    latency_s: Seconds | None = Field(None, ge=0, description="remote store: per-transfer latency")
    usd_per_gb_month: float | None = Field(None, ge=0, description="price of this tier's capacity, USD per GB-month; "
                                           "default: the tier kind's (dram, disk, remote: the hardware profile's fields)")
    shared: bool = Field(False, description="remote store: one store every instance reads (Mooncake Store / LMCache remote "
                                            "style); capacity_bytes is then the whole store, split evenly into each instance's "
                                            "share of what it writes, and any instance hits any share over the network")

    @model_validator(mode="after")
    def _exclusive_is_write_back(self):
        if not self.inclusive and self.write_policy != "write_back":
            raise FieldError(("write_policy",), "an exclusive tier (inclusive: false) must use write_policy write_back")
        return self


class PrefetchConfig(Strict):
    """HiCache-style prefetch of disk/remote hits into DRAM, started when a request arrives.

    ``none``: disk/remote hits are loaded on demand at admission (staged through DRAM).
    ``best_effort``: the request is scheduled when it can be; whatever arrived is used.
    ``wait_complete``: the request is not scheduled before its prefetch finished.
    ``timeout``: as wait_complete, but for at most ``timeout_base_s + timeout_per_ki_token_s * tokens/1024``.
    """

    policy: Literal["none", "best_effort", "wait_complete", "timeout"] = "none"
    threshold_tokens: int = Field(256, ge=0, description="prefetch only if the disk/remote hit is at least this long")
    timeout_base_s: Seconds = Field(1.0, ge=0, description="timeout rule: fixed part of the wait limit")
    timeout_per_ki_token_s: Seconds = Field(0.25, ge=0, description="timeout rule: added per 1024 prefetched tokens")
    chunk_tokens: int = Field(4096, gt=0, description="prefetch transfer granularity (what arrived is usable chunk by chunk)")


class LinkOverride(BaseModel):
    """Bandwidth/latency of the link joining two tiers, overriding the hardware-derived value.

    Links by endpoints: ``dram -> hbm`` (C2C host-to-device, per instance), ``hbm -> dram``
    (device-to-host), ``disk -> dram`` / ``dram -> disk`` (the tray's NVMe read / write),
    ``remote -> dram`` / ``dram -> remote`` (the shared remote-store link), ``peer_hbm -> hbm``
    (NVLink ingress, per instance). The bandwidth is the link's total as built (per instance,
    per tray or shared, as listed)."""

    model_config = ConfigDict(extra="forbid", validate_default=True, populate_by_name=True, allow_inf_nan=False)

    from_tier: str = Field(alias="from", description="tier the data leaves (hbm, peer_hbm, dram, disk, remote)")
    to_tier: str = Field(alias="to", description="tier the data enters")
    bandwidth_bytes_per_s: BytesPerSecond | None = Field(None, gt=0, description="the link's bandwidth")
    latency_s: Seconds | None = Field(None, ge=0, description="per-transfer setup latency")


#: The built-in lower tier kinds, in their default top-to-bottom order (the fields below).
BUILTIN_LOWER_TIERS = ("dram", "disk", "remote")


class TiersConfig(Strict):
    """The memory hierarchy below HBM, and how hits in it are used.

    ``dram``, ``disk`` and ``remote`` are the built-in tier kinds; any other key holding a
    tier mapping configures a registered tier kind (``agentsim.hardware.tier_kinds``), below the
    built-ins unless ``order`` says otherwise. Its name is checked against the registered kinds
    when the scenario is loaded (``config/`` does not know them)."""

    model_config = ConfigDict(extra="allow", validate_default=True)
    __pydantic_extra__: dict[str, TierConfig] = Field(init=False)

    dram: TierConfig | None = Field(None, description="host DRAM tier (Grace LPDDR), reached over NVLink-C2C")
    disk: TierConfig | None = Field(None, description="local NVMe tier, shared by the instances of a tray")
    remote: TierConfig | None = Field(None, description="remote store over the network (shared bandwidth)")
    peer_hbm: bool = Field(False, description="load prefixes held in HBM of another instance: over NVLink inside its "
                                                   "NVLink domain, over both instances' NICs (the scale-out network) across racks")
    load_rule: PolicyRef = Field(default_factory=lambda: PolicyRef(name="cost_model"),
                                 description="how to choose load vs recompute for hits below HBM: cost_model, always_load, never_load")
    overlap_layers: bool = Field(False, description="overlap loads layer by layer with the request's prefill")
    prefetch: PrefetchConfig = Field(default_factory=PrefetchConfig)
    on_tool_call: Literal["keep", "demote"] = Field("keep", description="when an agent starts a tool call: keep its KV in HBM or demote it to the next tier")
    prefetch_before_return: bool = Field(False, description="bring a demoted session's KV back to HBM before its predicted return")
    return_lead_s: Seconds = Field(0.5, ge=0, description="start that prefetch this long before the predicted return")
    order: list[str] | None = Field(
        None, description="lower tiers top to bottom (default dram, disk, remote); dram, if present, comes first; "
                          "e.g. [dram, remote, disk] puts a fast remote store above local NVMe")
    links: list[LinkOverride] = Field(default_factory=list, description="bandwidth/latency overrides of links between tiers")

    @model_validator(mode="before")
    @classmethod
    def _extra_keys_are_tiers(cls, data):
        """A key that is no field must hold a tier mapping; anything else is a misspelt key."""
        if isinstance(data, dict):
            for key, value in data.items():
                if key not in cls.model_fields and not isinstance(value, dict):
                    raise FieldError((key,), f"unknown key {key!r}{did_you_mean(key, cls.model_fields, cutoff=0.5)}")
        return data

    def extra_tier_names(self) -> tuple[str, ...]:
        """Tiers of registered kinds other than the built-ins, in the order written."""
        return tuple(self.__pydantic_extra__ or ())

    def lower_tiers(self) -> list[tuple[str, TierConfig]]:
        """Every configured lower tier (enabled or not), built-ins first, in default order."""
        out = []
        for name in BUILTIN_LOWER_TIERS + self.extra_tier_names():
            tier = getattr(self, name, None)
            if tier is not None:
                out.append((name, tier))
        return out

    def enabled_tiers(self) -> list[tuple[str, TierConfig]]:
        """Enabled lower tiers, top to bottom (``order`` if given; disabled tiers skipped)."""
        out = []
        for name in (self.order or BUILTIN_LOWER_TIERS + self.extra_tier_names()):
            tier = getattr(self, name, None)
            if tier is not None and tier.enabled:
                out.append((name, tier))
        return out

    def active(self) -> bool:
        return bool(self.enabled_tiers()) or self.peer_hbm


class CacheConfig(Strict):
    block_tokens: int = Field(64, gt=0, description="tokens per KV block (page)")
    eviction: PolicyRef = Field(default_factory=PolicyRef, description="HBM eviction policy")
    tiers: TiersConfig | None = Field(None, description="tiers below HBM (DRAM, disk, remote, peer HBM); absent = HBM only")
    admission: PolicyRef = Field(default_factory=lambda: PolicyRef(name="admit_all"),
                                 description="A1 admission filter at release (admit_all, second_hit, tinylfu, no_decode_cache, no_prefix_cache; see `agentsim policies`)")
    eviction_granularity: Literal["block", "node"] = Field(
        "block", description="how much an eviction frees: block = exactly the blocks asked for, from the victim's "
                             "tail (vLLM's and TensorRT-LLM's free-block pools; the policies' exact specification); "
                             "node = the victim's whole node, even if that is more (SGLang's RadixCache.evict and "
                             "HiCache's write-back, which free whole radix nodes). Applies to every tier")


class SloConfig(Strict):
    """Per-request targets (for SLA attainment) and run-level percentile targets."""

    ttft_s: Seconds = Field(2.0, gt=0, description="a request meets its SLO if TTFT <= ttft_s ...")
    tpot_s: Seconds = Field(0.1, gt=0, description="... and TPOT <= tpot_s")
    ttft_p99_s: Seconds | None = Field(None, gt=0, description="run-level target on p99 TTFT")
    attainment_target: float = Field(0.99, gt=0, le=1, description="share of requests that must meet the SLO")


class RunConfig(Strict):
    warmup_s: Seconds = Field(0.0, ge=0, description="requests arriving before this are excluded from latency summaries")
    progress_interval_s: Seconds = Field(60.0, gt=0, description="simulated seconds between progress updates")
    check_invariants: bool = Field(False, description="verify cache invariants after every event (slow)")
    belady_headroom: bool = Field(
        True, description="after the run, replay its request stream through Belady and the run's policy "
                          "(summary: belady_headroom); off saves that replay (about half of a default run's "
                          "time after the event loop) and the memory of the stream, e.g. in large sweeps")
    recompute_split: bool = Field(
        True, description="split each request's recomputed tokens by cause (cold, evicted by tier, invalidated; "
                          "summary: recomputed_tokens_cold, ...); off saves its record of every block a cache "
                          "loses (a fifth to a third of a run whose requests are long and never share a "
                          "prefix, e.g. check-timing) and reports the split as null")


class Scenario(Strict):
    """A complete simulation scenario."""

    name: str = "scenario"
    description: str = ""
    seed: int = Field(0, ge=0)
    duration_s: Seconds = Field(gt=0, description="simulated time during which sessions may start")
    drain: bool = Field(True, description="let sessions started before duration_s finish their in-flight call (for at "
                        "most limits.max_drain_s); false: the run ends at duration_s, calls in flight rejected (drain_limit)")
    hardware: HardwareConfig = Field(default_factory=HardwareConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)
    workload: WorkloadConfig
    slo: SloConfig = Field(default_factory=SloConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    limits: Limits = Field(default_factory=Limits, description="size limits checked before the run allocates anything")

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        return check_output_name(value)

    @model_validator(mode="after")
    def _warmup_within_duration(self):
        # Every request would arrive inside the warm-up and be left out of every latency figure.
        if self.run.warmup_s >= self.duration_s:
            raise FieldError(("run", "warmup_s"), f"warmup_s ({self.run.warmup_s:g} s) is not shorter than duration_s "
                                                  f"({self.duration_s:g} s): no request would be measured")
        return self

    @model_validator(mode="after")
    def _within_limits(self):
        """The size limits (:mod:`agentsim.config.limits`), before anything is sized from them."""
        check_limits(self)
        return self

    @model_validator(mode="after")
    def _cross_checks(self):
        if self.serving.disaggregation is None and (problem := self.hardware.racks_problem()) is not None:
            raise problem
        weights_bytes = self.weights_bytes()
        hbm_total = self.hardware.hbm_bytes_per_gpu * self.hardware.gpus_per_instance
        if self.hardware.kv_capacity_bytes is None:
            free = hbm_total * (1 - self.hardware.hbm_reserve_fraction) - weights_bytes
            if free <= 0:
                raise FieldError(("hardware", "gpus_per_instance"),
                    f"model weights ({weights_bytes / 1e9:.0f} GB) do not fit in {self.hardware.gpus_per_instance} GPUs' HBM "
                    f"({hbm_total / 1e9:.0f} GB after a {self.hardware.hbm_reserve_fraction:.0%} reserve); "
                    "add GPUs per instance or set hardware.kv_capacity_bytes"
                )
        elif self.hardware.kv_capacity_bytes + weights_bytes > hbm_total:
            # The weights live in the same HBM: KV gets what they leave.
            raise FieldError(("hardware", "kv_capacity_bytes"),
                f"{self.hardware.kv_capacity_bytes / 1e9:.4g} GB of KV exceeds the instance's HBM left beside the "
                f"model weights ({max(0.0, hbm_total - weights_bytes) / 1e9:.0f} GB of {hbm_total / 1e9:.0f} GB after "
                f"{weights_bytes / 1e9:.0f} GB of weights)"
            )
        par = self.serving.parallelism
        gpus = self.hardware.gpus_per_instance
        if par.tp is not None and par.tp * par.pp * par.attention_dp != gpus:
            raise FieldError(("serving", "parallelism", "tp"),
                             f"tp {par.tp} x pp {par.pp} x attention_dp {par.attention_dp} must equal hardware.gpus_per_instance ({gpus})")
        if par.tp is None and gpus % (par.pp * par.attention_dp):
            raise FieldError(("serving", "parallelism", "pp"),
                             f"pp {par.pp} x attention_dp {par.attention_dp} must divide hardware.gpus_per_instance ({gpus})")
        if (problem := self.hardware.instance_span_problem(gpus)) is not None:
            raise FieldError(("hardware", "gpus_per_instance"), problem)
        if self.model.is_moe() and (problem := par.moe_split_problem(gpus)) is not None:
            raise FieldError(("serving", "parallelism", problem[0]), problem[1])
        if self.serving.disaggregation is not None:
            check_pools(self)
        longest_context = max(c.max_context_tokens for c in self.workload.agent_classes.values())
        if self.cache.block_tokens > longest_context:
            # A block is cached only when full: no prompt could ever fill one.
            raise FieldError(("cache", "block_tokens"), f"blocks of {self.cache.block_tokens:,} tokens are longer than "
                             f"any context (max_context_tokens at most {longest_context:,}): no prompt fills a block, "
                             "so nothing could ever be cached")
        block_bytes = self.cache.block_tokens * self.model.kv_bytes_per_token
        if self.kv_capacity_bytes_per_instance() < block_bytes:
            blamed = ("hardware", "kv_capacity_bytes") if self.hardware.kv_capacity_bytes is not None else ("cache", "block_tokens")
            raise FieldError(blamed, f"KV capacity ({self.kv_capacity_bytes_per_instance():,.0f} bytes per instance) is smaller "
                                     f"than one block ({block_bytes:,.0f} bytes: {self.cache.block_tokens} tokens of "
                                     f"{self.model.kv_bytes_per_token:,.0f} bytes)")
        return self

    def kv_capacity_bytes_per_instance(self) -> float:
        """HBM bytes available for KV in one instance (given, or HBM minus weights minus reserve)."""
        if self.hardware.kv_capacity_bytes is not None:
            return self.hardware.kv_capacity_bytes
        hbm_total = self.hardware.hbm_bytes_per_gpu * self.hardware.gpus_per_instance
        return hbm_total * (1 - self.hardware.hbm_reserve_fraction) - self.weights_bytes()

    def weights_bytes(self) -> float:
        """Bytes of model weights one instance holds, at the serving precision (see
        :func:`agentsim.config.weights.weights_bytes`)."""
        return weights_bytes(self.model, self.serving.precision)

    def kv_capacity_blocks_per_instance(self) -> int:
        return int(self.kv_capacity_bytes_per_instance() // (self.cache.block_tokens * self.model.kv_bytes_per_token))
