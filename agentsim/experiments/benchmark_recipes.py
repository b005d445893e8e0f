"""Engine flags the benchmark recipes launched the servers of measured rows with.

The InferenceX rows (:mod:`.benchmark_clients`) ran engines launched by InferenceX's recipes
(``benchmarks/single_node/<model>_<precision>_<gpu>.sh``, read at the commits of March-April
2026 that the rows' ``measured=`` dates fall in). For SGLang on B200 and B300 those set flags
that change how requests are scheduled, not only how fast kernels run:

* ``--scheduler-recv-interval``: 30 when the benchmark's concurrency is at least 16, else 10
  (DeepSeek-R1 and Qwen3.5; the TP4 DeepSeek-R1 FP8 recipe and Qwen3.5 FP8 on B300 always 10);
  GLM-5 and every H200 recipe leave it at SGLang's default of 1
  (:mod:`agentsim.cluster.serving.recv_interval`).
* ``--chunked-prefill-size`` / ``--max-prefill-tokens``: the prefill batch's token budget.

:func:`recipe_serving` gives those as ``serving`` settings for a row, or nothing when the row was
not measured by such a recipe (aiconfigurator's own eval rows, other engines); the values
(``RECIPES``) are the recipes' own, per (model family, system, precision, tensor parallelism).
The recipes' ``--max-running-requests`` (128-256) is not applied: rows of 512 clients measure
TTFTs (DeepSeek-R1 FP8 on B200, 1k/1k: 3.1 s) that a cap of 128 running requests would make
tens of seconds, so those rows ran another variant of the recipe; rows do not say which.

TensorRT-LLM's recipes set ``--max_num_tokens``, the step's token budget (TensorRT-LLM's own
default is 8192), and :func:`recipe_serving` gives it as ``max_num_batched_tokens``:

* DeepSeek-R1/V3 (``dsr1_*_trt``): ``(CONC + ISL + 64)`` rounded up to a multiple of 64, room for
  one whole prompt beside every decoding request and no more, so a burst of prompts is prefilled
  one per step; from 2026-01-21 (InferenceX #258, "Adding evals after throughput benchmarks") at
  least 8192. A row's ``measured=`` date says which applied.
* gpt-oss-120b (``gptoss_fp4_*_trt``): 20000. Llama-3.1-70B (``70b_*_trt``, October 2025): 16384.

With attention DP, the DeepSeek-R1/V3 and gpt-oss-120b TensorRT-LLM recipes also set
``attention_dp_config: enable_balance: true`` (DeepSeek with ``timeout_iters: 60`` and
``batching_wait_iters: 0``, in every version since September 2025; gpt-oss with TensorRT-LLM's
default ``timeout_iters`` of 50), which :func:`recipe_serving` gives as
``adp_balance_timeout_iters`` (:mod:`agentsim.cluster.serving.recv_interval`). gpt-oss's default
``batching_wait_iters`` of 10 (a further wait once every rank has a context request) is not
modelled.

Some TensorRT-LLM recipes hold context requests to batch prompts (``batch_wait_timeout_iters``,
``batch_wait_max_tokens_ratio``; :mod:`agentsim.cluster.serving.batch_wait`): Llama-3.1-70B at
1k/1k below TP 8 (20 iterations, 0.9) and DeepSeek-R1 FP8 on B200/B300 at 1k/1k from 64 clients
(40, 0.8), by date (:data:`TRTLLM_BATCH_WAIT`).

The vLLM recipes of these rows leave ``--max-num-batched-tokens`` at vLLM's default for the API
server (8192 on GPUs of 70 GiB or more) or set 8192, except MiniMax-M2.5 on B200 from April 2026
(``2 x ISL``); that one is not applied (the rows span the change and do not say which ran).

:func:`server_prefix_caching` says whether the server kept a prefix cache (the emulation then
runs with ``cache.admission: no_prefix_cache`` when it did not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentsim.experiments.benchmark_clients import INFERENCEX, client_protocol


@dataclass(frozen=True)
class TrtllmBatchWait:
    """A TensorRT-LLM recipe's ``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio``
    and the rows it launched (``None``: any)."""

    #: Model-name fragment of the recipe's models.
    model: str
    isl: int
    osl: int
    timeout_iters: int
    max_tokens_ratio: float
    #: Only below this tensor parallelism.
    below_tp: int | None = None
    #: Only from this many clients (the benchmark's concurrency).
    min_clients: int = 0
    precision: str | None = None
    systems: tuple[str, ...] | None = None
    #: Only rows measured on or after this date (the recipe's first commit with it).
    from_date: str | None = None

    def applies(self, row: dict, clients: int, tp: int) -> bool:
        """Whether this recipe launched ``row``'s server (``clients``, ``tp``: its deployment)."""
        date = measured_date(row)
        return (self.model in str(row.get("model_path") or "").lower()
                and row.get("isl") == self.isl and row.get("osl") == self.osl
                and (self.below_tp is None or tp < self.below_tp) and clients >= self.min_clients
                and (self.precision is None or str(row.get("precision") or "").strip().lower() == self.precision)
                and (self.systems is None or str(row.get("system") or "").strip() in self.systems)
                and (self.from_date is None or (date is not None and date >= self.from_date)))


#: The TensorRT-LLM recipes that hold context requests to batch them (at 1k/1k): Llama-3.1-70B
#: below TP 8 (``70b_*_trt_slurm.sh``, September-November 2025, which every Llama-3.1-70B row's
#: date falls in: "For 1k/1k, use batch_wait_max_tokens_ratio and batch_wait_timeout_iters will
#: improve the performance"); DeepSeek-R1 FP8 on B200 from 64 clients (``dsr1_fp8_b200_trt.sh``,
#: ``DELAY_BATCHING``, from 2026-01-27) and on B300 (from 2026-02-25). TensorRT-LLM applies it
#: only without attention DP (:func:`agentsim.cluster.serving.recv_interval.receive_gate`).
TRTLLM_BATCH_WAIT = (
    TrtllmBatchWait("llama-3.1-70b", 1024, 1024, 20, 0.9, below_tp=8),
    TrtllmBatchWait("deepseek", 1024, 1024, 40, 0.8, min_clients=64, precision="fp8", systems=("b200_sxm",),
                    from_date="2026-01-27"),
    TrtllmBatchWait("deepseek", 1024, 1024, 40, 0.8, min_clients=64, precision="fp8", systems=("b300_sxm",),
                    from_date="2026-02-25"),
)


@dataclass(frozen=True)
class SglangRecipe:
    """One recipe's scheduling flags (``None``: SGLang's default, left to the scenario)."""

    #: ``(below 16 clients, 16 or more)``: ``--scheduler-recv-interval``.
    recv_interval: tuple[int, int] = (1, 1)
    #: ``--chunked-prefill-size`` (= ``--max-prefill-tokens`` where both are set).
    prefill_tokens: int | None = None


#: (model family, system, precision, tp or None for any): the recipe's flags.
RECIPES: dict[tuple[str, str, str, int | None], SglangRecipe] = {
    ("deepseek", "b200_sxm", "fp8", 8): SglangRecipe((10, 30), 32768),
    ("deepseek", "b200_sxm", "fp8", 4): SglangRecipe((10, 10), 8192),
    ("deepseek", "b200_sxm", "fp4", None): SglangRecipe((10, 30), 16384),
    ("deepseek", "b300_sxm", "fp8", 8): SglangRecipe((10, 30), 32768),
    ("deepseek", "b300_sxm", "fp8", 4): SglangRecipe((10, 10), 8192),
    ("deepseek", "b300_sxm", "fp4", None): SglangRecipe((10, 30), 16384),
    ("deepseek", "h200_sxm", "fp8", None): SglangRecipe((1, 1), 32768),
    ("qwen3.5", "b200_sxm", "bf16", None): SglangRecipe((10, 30), 32768),
    ("qwen3.5", "b200_sxm", "fp8", None): SglangRecipe((10, 30), 32768),
    ("qwen3.5", "b200_sxm", "fp4", None): SglangRecipe((10, 30), 32768),
    ("qwen3.5", "b300_sxm", "bf16", None): SglangRecipe((10, 30), 32768),
    ("qwen3.5", "b300_sxm", "fp4", None): SglangRecipe((10, 30), 32768),
    ("qwen3.5", "b300_sxm", "fp8", None): SglangRecipe((10, 10), 16384),
    ("qwen3.5", "h200_sxm", "fp8", None): SglangRecipe((1, 1), 16384),
    ("glm-5", "b200_sxm", "fp8", None): SglangRecipe((1, 1), 32768),
    ("glm-5", "b300_sxm", "fp8", None): SglangRecipe((1, 1), 32768),
}
#: Model-name fragments of the recipes' model families.
_FAMILIES = {"deepseek-r1": "deepseek", "deepseek-v3": "deepseek", "qwen3.5": "qwen3.5", "glm-5": "glm-5"}


#: Model-name fragments of the TensorRT-LLM recipes with a fixed ``--max_num_tokens``.
TRTLLM_MAX_NUM_TOKENS = {"gpt-oss-120b": 20000, "llama-3.1-70b": 16384}
#: Model-name fragments of the TensorRT-LLM recipes that balance attention-DP ranks, and their
#: ``timeout_iters`` (gpt-oss leaves TensorRT-LLM's default).
TRTLLM_ADP_BALANCE_TIMEOUT_ITERS = {"deepseek-r1": 60, "deepseek-v3": 60, "gpt-oss-120b": 50}
#: DeepSeek's TensorRT-LLM recipes floor their budget at 8192 from this date (InferenceX #258).
TRTLLM_DEEPSEEK_FLOOR_FROM = "2026-01-21"
_DEEPSEEK_FLOOR_TOKENS = 8192
_IMAGE = re.compile(r"image=([^;\s]+)")


def measured_date(row: dict) -> str | None:
    """The ``measured=YYYY-MM-DD`` of a row's ``silicon_data_source`` (None without one)."""
    source = str(row.get("silicon_data_source") or "")
    at = source.find("measured=")
    return source[at + 9:at + 19] if at >= 0 else None


def row_image(row: dict) -> str | None:
    """The container image a row names (``image=...``, or the database dump's last field, as
    ``lmsysorg/sglang:v0.5.9-cu130``), enroot's ``nvcr.io#...`` written ``nvcr.io/...``; None if
    it names none."""
    source = str(row.get("silicon_data_source") or "")
    found = _IMAGE.search(source)
    image = found.group(1) if found else None
    if image is None:
        last = source.rsplit(";", 1)[-1].strip()
        image = last if (":" in last and "/" in last and "=" not in last) else None
    return image.replace("#", "/") if image else None


def _trtllm_tokens(row: dict, clients: int) -> int | None:
    """``--max_num_tokens`` of the TensorRT-LLM recipe that launched ``row`` (None: none known)."""
    name = str(row.get("model_path") or "").lower()
    if "deepseek-r1" in name or "deepseek-v3" in name:
        tokens = (clients + int(row["isl"]) + 64 + 63) // 64 * 64
        date = measured_date(row)
        if date is None or date >= TRTLLM_DEEPSEEK_FLOOR_FROM:
            tokens = max(tokens, _DEEPSEEK_FLOOR_TOKENS)
        return tokens
    return next((tokens for fragment, tokens in TRTLLM_MAX_NUM_TOKENS.items() if fragment in name), None)


def _recipe(row: dict, tp: int) -> SglangRecipe | None:
    name = str(row.get("model_path") or "").lower()
    family = next((f for fragment, f in _FAMILIES.items() if fragment in name), None)
    key = (family, str(row.get("system") or "").strip(), str(row.get("precision") or "").strip().lower())
    return RECIPES.get((*key, tp)) or RECIPES.get((*key, None))


def server_prefix_caching(row: dict) -> bool:
    """Whether ``row``'s server kept a prefix cache. InferenceX's recipes turn it off (vLLM
    ``--no-enable-prefix-caching``, SGLang ``--disable-radix-cache``, TensorRT-LLM
    ``enable_block_reuse: false`` in the Dynamo recipes; a few recipes of other models keep it),
    and so does aiconfigurator's generator for TensorRT-LLM (``enable_block_reuse`` defaults to
    false in its templates); its vLLM and SGLang launches keep the engines' default, on. The
    benchmarks' random prompts never share a prefix, so it matters only to a preempted request,
    which with the cache off recomputes everything it had."""
    if client_protocol(row) is INFERENCEX:
        return False
    return str(row.get("backend") or "").strip() != "trtllm"


def recipe_serving(row: dict, clients: int, tp: int, attention_dp: int = 1) -> dict:
    """``serving`` settings of the recipe that launched ``row``'s server ({} if none applies):
    SGLang's ``scheduler_recv_interval`` (for ``clients``, the benchmark's concurrency) and
    ``max_num_batched_tokens``; TensorRT-LLM's ``max_num_batched_tokens`` and, with
    ``attention_dp`` ranks, ``adp_balance_timeout_iters``."""
    backend = str(row.get("backend") or "").strip()
    if client_protocol(row) is not INFERENCEX:
        return {}
    if backend == "trtllm":
        settings = {}
        tokens = _trtllm_tokens(row, clients)
        if tokens is not None:
            settings["max_num_batched_tokens"] = tokens
        name = str(row.get("model_path") or "").lower()
        timeout = next((t for fragment, t in TRTLLM_ADP_BALANCE_TIMEOUT_ITERS.items() if fragment in name), None)
        if attention_dp > 1 and timeout is not None:
            settings["adp_balance_timeout_iters"] = timeout
        wait = next((w for w in TRTLLM_BATCH_WAIT if w.applies(row, clients, tp)), None)
        if wait is not None:
            settings["batch_wait_timeout_iters"] = wait.timeout_iters
            settings["batch_wait_max_tokens_ratio"] = wait.max_tokens_ratio
        return settings
    if backend != "sglang":
        return {}
    recipe = _recipe(row, tp)
    if recipe is None:
        return {}
    settings: dict = {}
    interval = recipe.recv_interval[1 if clients >= 16 else 0]
    if interval > 1:
        settings["scheduler_recv_interval"] = interval
    if recipe.prefill_tokens is not None:
        settings["max_num_batched_tokens"] = recipe.prefill_tokens
    return settings
