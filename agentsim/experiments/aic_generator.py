"""The engine limits aiconfigurator's config generator wrote for the rows of its eval harness.

The rows of aiconfigurator's eval harness (:mod:`.benchmark_clients`) ran engines that
aiconfigurator launched from configurations its own generator wrote (``aiconfigurator eval``
generated a Dynamo deployment and benchmarked it; ``src/aiconfigurator/generator`` in
ai-dynamo/aiconfigurator). Its heuristic for an aggregated worker sizes the step's token budget
to room for one prompt beside every decoding request, rather than the engine's default of 8192:

* **TensorRT-LLM**: ``max_num_tokens = max_batch_size + isl + 1500``, with chunked prefill off
  (``enable_chunked_prefill: false`` in its engine templates), so a round of prompts that arrive
  together is prefilled one or two per step. The generator's TensorRT-LLM backend has written it
  into the engine's config since September 2025 (``cli/backends/trtllm.py``, then
  ``generator/backends/trtllm.py``); its 2026 rules keep the formula (``+ 500`` in the default
  rules of December 2025 - January 2026, ``+ 1500`` in the benchmark rules) and round it up to a
  KV block. ``max_batch_size`` is the deployment's batch size, taken as the row's ``batch_size``
  (its concurrency per attention-DP rank: the harness benchmarked each deployment at the batch
  it was generated for).

Not applied, because the rows do not say which version of the generator launched them: its
vLLM rules (``rule_plugin/vllm.rule``, December 2025) give ``max_num_batched_tokens =
max_batch_size + isl + 1500``, but its vLLM launch script passed that flag only from 2026-01-08
(ai-dynamo/aiconfigurator #238; before, vLLM's default budget); its SGLang rules give
``max_prefill_tokens = isl + 1500`` and ``enable_mixed_chunk`` for aggregated workers, which the
SGLang rows do not behave as (Llama-3.1-8B on one H200 node at 352 clients of 1,000 + 100 tokens,
SGLang 0.5.6: 812 ms of TTFT and 33 ms of TPOT, 86 prompts a second, which a 2,500-token prefill
budget per 35 ms step cannot admit; emulated so, 2.02 s), and the rows of SGLang 0.5.1 predate
its SGLang support. The same templates turn TensorRT-LLM's KV block reuse off
(``enable_block_reuse: false``), which changes nothing here: the benchmark's prompts share no
prefix.
"""

from __future__ import annotations

from agentsim.experiments.benchmark_clients import FIXED_LENGTHS, client_protocol

#: Tokens the generator adds to ``max_batch_size + isl`` for an aggregated worker's step budget.
HEADROOM_TOKENS = 1500
#: Engines whose step budget the generator's configurations are known to have set.
ENGINES = frozenset({"trtllm"})


def generator_serving(row: dict) -> dict:
    """``serving`` settings of the engine configuration aiconfigurator's generator wrote for an
    aggregated eval-harness ``row`` ({} for any other row, or an engine whose budget it is not
    known to have set)."""
    if client_protocol(row) is not FIXED_LENGTHS or str(row.get("mode") or "").strip() != "agg":
        return {}
    if str(row.get("backend") or "").strip() not in ENGINES:
        return {}
    batch = int(float(row.get("batch_size") or 1))
    return {"max_num_batched_tokens": batch + int(row["isl"]) + HEADROOM_TOKENS}
