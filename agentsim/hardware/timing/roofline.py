"""Roofline step timing: the fallback for deployments the measured databases lack.

Per iteration, with ``N`` tokens in the step (prefill chunk tokens plus one per decoding
sequence) on ``G`` GPUs:

* compute: ``2*A*N`` linear-layer FLOPs, prefill attention ``2*attn_coeff*(n*p + n^2/2)`` per
  chunk, decode attention ``2*decode_attn_coeff*context`` (absorbed MLA reads the latent KV per
  head, so its decode coefficient is larger than the prefill form's), at the peak of the
  weights' dtype (FP4 / FP8 / BF16 differ by 2x each) times the MFU;
* memory: the weights touched (dense part plus the *distinct* experts the step's tokens route
  to, ``E*(1 - (1 - k/E)^N)`` of ``E`` experts with ``k`` per token) plus the decoding
  sequences' KV, at HBM bandwidth times the MBU;
* step = max(compute, memory) + tensor-parallel all-reduce (two per layer over ``N*hidden``
  BF16 activations, ring: ``2*(tp-1)/tp`` of the bytes over NVLink plus a latency each) +
  a fixed per-iteration host cost (scheduling, sampling, launches), and in an iteration with
  a prefill chunk the host time of its eager layers (:mod:`.prefill_host`).

It implements the same step-timer contract as :class:`~.tabulated.TabulatedTimer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from agentsim.hardware.timing import linear_decode

#: Per-iteration host cost by engine (s): scheduling, sampling and kernel launches, which
#: per-kernel timing does not see. [estimate] 2-5 ms per step at TP2-8 for vLLM; SGLang's
#: overlapped scheduler hides part of it; TensorRT-LLM prepares step n+1 on the host while step
#: n runs (overlap scheduler) and replays decode steps as CUDA graphs, so none of it shows in
#: its step time (check-timing: with 2.5 ms, TRT-LLM TPOT was over-predicted for every model,
#: Llama-3.1-8B 1.27x, Llama-3.1-70B 1.57x). See docs/validation.md.
ENGINE_OVERHEAD_S = {"vllm": 3e-3, "trtllm": 0.0, "sglang": 2e-3}
#: Latency of one all-reduce launch inside an NVLink domain (NCCL small-message latency).
ALLREDUCE_LATENCY_S = 8e-6
#: Time per layer per step that no kernel goes below, whatever the bytes and FLOPs: a layer is
#: 10-20 kernels (norms, projections, attention, router, experts, activations), each a few us
#: at the least. [calibrated to the measured kernel databases, not to benchmark rows] Decode
#: steps of batch 1 in aiconfigurator-core's databases (TP 1-8, one NVLink node, 38
#: deployments of vLLM, SGLang, TRT-LLM) exceed this roofline's weight-read time by a median
#: of 75 us per layer, of which 16 us are the two all-reduce latencies counted separately.
KERNEL_FLOOR_S_PER_LAYER = 60e-6
#: Share of the prefill MFU that MoE expert GEMMs reach: each expert sees only ``k/E`` of the
#: step's tokens (grouped GEMMs of a few hundred rows), plus routing and permutation. [calibrated
#: to the measured kernel databases] Their 8k-token prefills of MoE models take a median of 2.9x
#: this roofline's time at the full MFU, dense models about 1.2x.
MOE_GEMM_EFFICIENCY = 0.4


@dataclass(frozen=True)
class RooflineTimer(linear_decode.LinearDecodeStretches):
    active_params: float
    total_params: float
    bytes_per_param: float
    attn_coeff: float
    decode_attn_coeff: float
    kv_bytes_per_token: float
    flops_per_s: float          # whole instance, weights' dtype peak at MFU
    bytes_per_s: float          # whole instance, at MBU
    chunk_tokens: int
    routed_experts: int = 0     # 0: dense model
    experts_per_token: int = 0
    layers: int = 0
    hidden_size: int = 0
    tp: int = 1
    link_bytes_per_s: float = 450e9
    overhead_s: float = 0.0
    prefill_overhead_s: float = 0.0  # per iteration with a prefill chunk (prefill_host)
    layer_floor_s: float = 0.0  # per layer per step (KERNEL_FLOOR_S_PER_LAYER)
    moe_efficiency: float = 1.0  # expert GEMMs' share of the MFU (MOE_GEMM_EFFICIENCY)
    source: str = "roofline"
    _last: linear_decode.LastCoefficients = field(default_factory=linear_decode.LastCoefficients, init=False,
                                                  repr=False, compare=False)

    # --- pieces -----------------------------------------------------------------------------
    def _weight_bytes(self, tokens: float) -> float:
        if self.routed_experts and self.experts_per_token:
            share = self.experts_per_token / self.routed_experts
            routed = (self.total_params - self.active_params) / (1.0 - share)
            dense = self.total_params - routed
            touched = 1.0 - (1.0 - share) ** (tokens if tokens > 1 else 1)
            return (dense + routed * touched) * self.bytes_per_param
        return self.total_params * self.bytes_per_param

    def _allreduce_s(self, tokens: float) -> float:
        if self.tp <= 1 or not self.layers or not self.hidden_size:
            return 0.0
        per_call = 2.0 * (self.tp - 1) / self.tp * tokens * self.hidden_size * 2.0 / self.link_bytes_per_s
        return 2 * self.layers * (per_call + ALLREDUCE_LATENCY_S)

    def _linear_flops(self, tokens: float) -> float:
        """Linear-layer FLOPs of ``tokens`` tokens, the experts' weighted by their efficiency."""
        if self.routed_experts and self.experts_per_token and self.moe_efficiency != 1.0:
            share = self.experts_per_token / self.routed_experts
            routed_active = (self.total_params - self.active_params) / (1.0 - share) * share
            dense_active = self.active_params - routed_active
            return 2.0 * tokens * (dense_active + routed_active / self.moe_efficiency)
        return 2.0 * self.active_params * tokens

    def _step_s(self, tokens: float, attention_flops: float, kv_read_tokens: float) -> float:
        compute_s = (self._linear_flops(tokens) + attention_flops) / self.flops_per_s
        memory_s = (self._weight_bytes(tokens) + self.kv_bytes_per_token * kv_read_tokens) / self.bytes_per_s
        return ((compute_s if compute_s > memory_s else memory_s) + self._allreduce_s(tokens)
                + self.layers * self.layer_floor_s + self.overhead_s)

    # --- the step-timer contract ------------------------------------------------------------
    def iteration_s(self, chunks: Sequence[tuple[int, int]], n_decode: int, decode_context_tokens: float) -> float:
        tokens = float(n_decode)
        attention = 2.0 * self.decode_attn_coeff * decode_context_tokens
        for new, context in chunks:
            tokens += new
            attention += 2.0 * self.attn_coeff * (new * context + new * new / 2.0)
        step = self._step_s(tokens, attention, decode_context_tokens)
        return step + self.prefill_overhead_s if chunks else step

    def prefill_s(self, new_tokens: int, context_tokens: int) -> float:
        total, done = 0.0, 0
        while done < new_tokens:
            n = min(self.chunk_tokens, new_tokens - done)
            total += self.iteration_s(((n, context_tokens + done),), 0, 0.0)
            done += n
        return total

    def _decode_linear(self, n_decode: int, context_tokens: float) -> tuple[float, float]:
        first = self.iteration_s((), n_decode, context_tokens)
        horizon = max(1024.0 * n_decode, context_tokens)
        growth = (self.iteration_s((), n_decode, context_tokens + horizon) - first) / horizon * n_decode
        return first, growth if growth > 0 else 0.0
