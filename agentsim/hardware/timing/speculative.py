"""Decode steps with multi-token prediction (``serving.speculative_decoding``), as
aiconfigurator-core times them.

With DeepSeek's MTP layers (TensorRT-LLM's ``speculative_config: MTP``, SGLang's
``--speculative-algorithm EAGLE`` over the ``nextn`` layers) every decode iteration runs the
``nextn`` draft layers and verifies ``nextn + 1`` tokens per sequence, and emits on average
``1 + E`` of them, ``E = sum_i prod_{j<=i} accept_rates[j]`` over the first ``nextn`` rates.
aiconfigurator-core's rule (``sdk/models/helpers.py: mtp_scale_factor``,
``backends/base_backend.py``): the generation step is evaluated with ``batch x (nextn + 1)``
query tokens and its operations scaled by ``(layers + nextn) / layers``; the accepted-token
progress is applied above the step (``decode_tokens_per_iteration``). Its default acceptance,
used by aiconfigurator's and Dynamo's planners when none is measured, is
:data:`DEFAULT_ACCEPT_RATES`.

:class:`SpeculativeDecodeTimer` wraps any step timer (measured tables or roofline) with that
rule. The serving instance advances its decoding requests one output token per clock step, so
one of its steps here is ``1 / (1 + E)`` of an engine iteration: a decode-only step of ``n``
sequences at summed context ``K`` takes ``scale x base(n x (nextn + 1), K) / (1 + E)`` (the
summed context stays ``K``: the draft tokens of a sequence read its KV once). The context
still grows by one token per sequence per step, as the accepted tokens do on average.
Simplified: in a mixed iteration (prefill chunks with decoding requests) the decoding requests
advance one token for the whole verify iteration (a disaggregated decode worker has none).
"""

from __future__ import annotations

from typing import Sequence

from agentsim.hardware.timing import linear_decode


def accepted_per_iteration(draft_tokens: int, accept_rates: Sequence[float]) -> float:
    """Expected draft tokens accepted per iteration (aiconfigurator's ``calc_mtp_expectation``):
    position i is accepted only when every earlier one was."""
    expectation, chance = 0.0, 1.0
    for rate in list(accept_rates)[:draft_tokens]:
        chance *= rate
        expectation += chance
    return expectation


class SpeculativeDecodeTimer(linear_decode.LinearDecodeStretches):
    """``base`` (a step timer) with ``draft_tokens`` MTP draft layers per decode iteration on a
    model of ``layers`` transformer layers (0: the draft layers' own cost is not added)."""

    def __init__(self, base, draft_tokens: int, accept_rates: Sequence[float], layers: int):
        self.base = base
        self.kv_bytes_per_token = base.kv_bytes_per_token
        self.verify_width = draft_tokens + 1
        #: Output tokens one engine iteration emits per sequence (1 + accepted drafts).
        self.tokens_per_iteration = 1.0 + accepted_per_iteration(draft_tokens, accept_rates)
        self.layer_scale = (layers + draft_tokens) / layers if layers > 0 else 1.0
        self._per_token = self.layer_scale / self.tokens_per_iteration
        self._last = linear_decode.LastCoefficients()

    def __getattr__(self, name):      # source, attention_dp, ... of the base timer
        if name == "base":            # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    def _decode_linear(self, n_decode: int, context_tokens: float) -> tuple[float, float]:
        """(first step, growth per step) of one output token per sequence: the base's verify
        iteration at ``n x width`` query tokens, per emitted token. The base's growth is per
        ``n x width`` context tokens; one output step adds ``n``."""
        width = self.verify_width
        first = self.base.decode_stretch_s(n_decode * width, context_tokens, 1)
        growth = self.base.decode_stretch_s(n_decode * width, context_tokens, 2) - 2 * first
        return first * self._per_token, max(growth, 0.0) * self._per_token / width

    def iteration_s(self, chunks, n_decode: int, decode_context_tokens: float) -> float:
        if not chunks:
            if n_decode <= 0:
                return self.base.iteration_s(chunks, 0, 0.0)
            return self.base.iteration_s(chunks, n_decode * self.verify_width, decode_context_tokens) * self._per_token
        # A mixed iteration: the decoding requests verify their drafts; one token is credited.
        return self.base.iteration_s(chunks, n_decode * self.verify_width, decode_context_tokens)

    def prefill_s(self, new_tokens: float, context_tokens: float) -> float:
        return self.base.prefill_s(new_tokens, context_tokens)


def with_speculative_decoding(timer, scenario):
    """``timer`` wrapped for ``serving.speculative_decoding`` when the scenario sets it."""
    spec = scenario.serving.speculative_decoding
    if spec is None:
        return timer
    return SpeculativeDecodeTimer(timer, spec.draft_tokens, spec.accept_rates, scenario.model.layers)
