"""Roofline timing of one serving instance's batch iterations.

* Prefill FLOPs for ``n`` new tokens after ``p`` cached/earlier tokens:
  ``2*A*n + 2*attn_coeff*(n*p + n^2/2)`` (linear layers plus causal attention).
* Decode: each sequence adds one token, costing ``2*A`` plus attention over its context.
* Bytes read per iteration: the weights touched (MoE: active parameters per sequence, up to all
  of them) plus the KV of every decoding sequence.
* Iteration time = max(FLOPs / (GPUs * peak * MFU), bytes / (GPUs * HBM bandwidth * MBU)).

Cached (hit) tokens cost no prefill FLOPs; they only enter the attention term as context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RooflineCostModel:
    active_params: float
    total_params: float
    bytes_per_param: float
    attn_coeff: float
    kv_bytes_per_token: float
    flops_per_s: float      # whole instance, at MFU
    bytes_per_s: float      # whole instance, at MBU

    @classmethod
    def from_scenario(cls, scenario) -> "RooflineCostModel":
        hw, model = scenario.hardware, scenario.model
        gpus = hw.gpus_per_instance
        return cls(
            active_params=model.active_params,
            total_params=model.total_params,
            bytes_per_param=model.bytes_per_param,
            attn_coeff=model.attn_coeff,
            kv_bytes_per_token=model.kv_bytes_per_token,
            flops_per_s=gpus * hw.dense_flops_per_gpu * hw.mfu_prefill,
            bytes_per_s=gpus * hw.hbm_bandwidth_bytes_per_s * hw.mbu_decode,
        )

    def prefill_flops(self, new_tokens: float, context_tokens: float) -> float:
        return 2.0 * self.active_params * new_tokens + 2.0 * self.attn_coeff * (
            new_tokens * context_tokens + new_tokens * new_tokens / 2.0)

    # The two-argument min()/max() below are spelled as comparisons with the same result
    # (``max(x, y)`` is ``y if y > x else x``): these run several times per event, and the
    # builtins' argument parsing cost 5% of the default scenario's event loop.
    def weight_bytes(self, n_sequences: int) -> float:
        active = self.active_params * (n_sequences if n_sequences > 1 else 1)
        touched = active if active < self.total_params else self.total_params  # min(total, active)
        return touched * self.bytes_per_param

    def iteration_s(self, chunks, n_decode: int, decode_context_tokens: float) -> float:
        """Step-timer contract: one iteration with ``chunks`` = (new_tokens, context_tokens) per
        prefilling sequence and ``n_decode`` decoding sequences of ``decode_context_tokens`` total."""
        flops = 0.0
        for new, context in chunks:
            flops += self.prefill_flops(new, context)
        return self.iteration_from_flops_s(flops, len(chunks), n_decode, decode_context_tokens)

    def prefill_s(self, new_tokens: int, context_tokens: int) -> float:
        """Step-timer contract: compute time of a prefill alone (the load-vs-recompute rule)."""
        return self.prefill_flops(new_tokens, context_tokens) / self.flops_per_s

    def iteration_from_flops_s(self, prefill_flops: float, n_prefill_seqs: int, n_decode: int, decode_context_tokens: float) -> float:
        """Time of one iteration with the given prefill work and decoding sequences."""
        flops = prefill_flops + 2.0 * self.active_params * n_decode + 2.0 * self.attn_coeff * decode_context_tokens
        read = self.weight_bytes(n_prefill_seqs + n_decode) + self.kv_bytes_per_token * decode_context_tokens
        compute_s, memory_s = flops / self.flops_per_s, read / self.bytes_per_s
        return memory_s if memory_s > compute_s else compute_s

    # --- decode-only stretches -------------------------------------------------------------
    def _decode_linear(self, n_decode: int) -> tuple[float, float]:
        """Step time as ``a + c*K`` for K total context tokens (upper envelope of the roofline)."""
        memory_s = self.weight_bytes(n_decode) / self.bytes_per_s
        compute_s = 2.0 * self.active_params * n_decode / self.flops_per_s
        memory_per_token_s = self.kv_bytes_per_token / self.bytes_per_s
        compute_per_token_s = 2.0 * self.attn_coeff / self.flops_per_s
        return (compute_s if compute_s > memory_s else memory_s,
                compute_per_token_s if compute_per_token_s > memory_per_token_s else memory_per_token_s)

    def decode_stretch_s(self, n_decode: int, context_tokens: float, steps: int) -> float:
        """Time of ``steps`` decode-only steps; the context grows by ``n_decode`` tokens a step."""
        a, c = self._decode_linear(n_decode)
        return steps * (a + c * context_tokens) + c * n_decode * steps * (steps - 1) / 2.0

    def decode_steps_within(self, n_decode: int, context_tokens: float, elapsed_s: float) -> int:
        """Number of whole decode steps completed within ``elapsed_s`` (inverse of the above)."""
        a, c = self._decode_linear(n_decode)
        b = a + c * context_tokens
        q = c * n_decode / 2.0
        if q <= 0:
            return int(elapsed_s // b) if b > 0 else 0
        # q*k^2 + (b - q)*k - elapsed <= 0
        lin = b - q
        k = (-lin + math.sqrt(lin * lin + 4 * q * elapsed_s)) / (2 * q)
        steps = int(math.floor(k + 1e-12))
        if steps < 0:
            steps = 0
        while steps > 0 and self.decode_stretch_s(n_decode, context_tokens, steps) > elapsed_s + 1e-12:
            steps -= 1
        while self.decode_stretch_s(n_decode, context_tokens, steps + 1) <= elapsed_s:
            steps += 1
        return steps
