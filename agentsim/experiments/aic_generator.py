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

* **vLLM**: ``max_num_batched_tokens = max_batch_size + isl + 1500`` (``rule_plugin/vllm.rule``,
  December 2025), which its vLLM launch script passes from 2026-01-08 on (ai-dynamo/aiconfigurator
  #238; before, vLLM's default budget of 8192). Every vLLM row of the eval harness ran vLLM 0.12.0,
  whose databases aiconfigurator added on 2025-12-22 (#199); the eval module was removed on
  2026-03-03 (#504), so those rows were measured in a window of ten weeks of which the first two
  and a half (over the holidays) predate the flag. The rows behave as launched with it: with 8192
  a round of 1,024-token prompts that arrive together is prefilled in one step and the clients stay
  in lock-step (Qwen3-32B on four H100s at 8 clients: 291 ms of TTFT predicted against 126 ms
  measured, one 8,192-token step), with the generator's budget two prompts a step (162 ms); over
  the 95 vLLM rows the rows above a TTFT error of 2.0 go 41 -> 22, TPOT unchanged (median 1.05 ->
  1.09 on Qwen3-32B / H100). It is applied to vLLM 0.12 and later (:data:`VLLM_FROM_VERSION`).

Not applied to SGLang: its rules give ``max_prefill_tokens = isl + 1500`` and
``enable_mixed_chunk`` for aggregated workers, which the SGLang rows do not behave as (Llama-3.1-8B on one H200 node at 352 clients of 1,000 + 100 tokens,
SGLang 0.5.6: 812 ms of TTFT and 33 ms of TPOT, 86 prompts a second, which a 2,500-token prefill
budget per 35 ms step cannot admit; emulated so, 2.02 s), and the rows of SGLang 0.5.1 predate
its SGLang support. The same templates turn TensorRT-LLM's KV block reuse off
(``enable_block_reuse: false``), which changes nothing here: the benchmark's prompts share no
prefix.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from agentsim.experiments.benchmark_clients import FIXED_LENGTHS, client_protocol

#: Tokens the generator adds to ``max_batch_size + isl`` for an aggregated worker's step budget.
HEADROOM_TOKENS = 1500
#: Engines whose step budget the generator's configurations are known to have set.
ENGINES = frozenset({"trtllm", "vllm"})
#: First vLLM version whose eval rows ran with the generator's budget (see the module docstring).
VLLM_FROM_VERSION = Version("0.12")


def generator_serving(row: dict) -> dict:
    """``serving`` settings of the engine configuration aiconfigurator's generator wrote for an
    aggregated eval-harness ``row`` ({} for any other row, or an engine whose budget it is not
    known to have set)."""
    if client_protocol(row) is not FIXED_LENGTHS or str(row.get("mode") or "").strip() != "agg":
        return {}
    backend = str(row.get("backend") or "").strip()
    if backend not in ENGINES:
        return {}
    if backend == "vllm":
        version = _version(row.get("backend_version"))
        if version is None or version < VLLM_FROM_VERSION:
            return {}
    batch = int(float(row.get("batch_size") or 1))
    return {"max_num_batched_tokens": batch + int(row["isl"]) + HEADROOM_TOKENS}


def _version(text) -> Version | None:
    """``text`` as a version (``"0.12.0"``, ``"1.1.0rc2.post2"``); None if it is not one (an
    empty or ``nan`` cell)."""
    try:
        return Version(str(text or "").strip())
    except InvalidVersion:
        return None
