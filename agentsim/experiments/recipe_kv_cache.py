"""The KV-cache data type the benchmark recipe of a measured row launched its engine with.

Every engine stores the KV cache in the model's activation type (BF16) unless told otherwise:
vLLM and SGLang ``--kv-cache-dtype auto``, TensorRT-LLM ``kv_cache_config.dtype: auto`` (which
follows the checkpoint's own quantisation config). Most of InferenceX's single-node recipes
(``benchmarks/single_node/<model>_<precision>_<gpu>[_trt].sh`` on InferenceX's main branch)
set FP8 instead: vLLM ``--kv-cache-dtype fp8``, SGLang ``--kv-cache-dtype fp8_e4m3``,
TensorRT-LLM ``kv_cache_config: {dtype: fp8}``. An FP8 KV cache holds twice the tokens of a BF16
one in the same memory, which decides whether a benchmark's clients all fit at once or queue
behind each other (Llama-3.1-70B FP8 on one B200, 64 clients of 1,024 + 8,192 tokens: 590K
tokens wanted, 293K held in BF16, 586K in FP8), and the decode attention reads half the bytes.

:data:`FP8_KV_RECIPES` lists the recipes that set FP8, with the day the setting reached main
where it came later than the recipe (a row's ``measured=`` date says which version ran, as for
the TensorRT-LLM token budget of :mod:`.benchmark_recipes`). The recipes not listed leave the
engine's default: gpt-oss-120b on H100/H200 (vLLM; TensorRT-LLM ``dtype: auto``), DeepSeek-R1
SGLang on H200, GLM-5 on H200, Qwen3.5 BF16, MiniMax-M2.5 FP8 on H200, Kimi-K2.5 INT4 and FP4 on
B300 (as of the rows' dates, November 2025 to April 2026). Rows of aiconfigurator's own eval
harness ran engines its config generator launched, which wrote its own KV-cache type
(:func:`generator_kv_cache`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentsim.experiments.benchmark_clients import FIXED_LENGTHS, INFERENCEX, client_protocol
from agentsim.experiments.benchmark_recipes import measured_date

#: The simulator's name (``serving.precision.kv_cache``) of the type these recipes set.
FP8 = "fp8"
#: Model profiles (``agentsim/profiles/models.yaml``) whose ``kv_bytes_per_token`` count BF16
#: values (two bytes each, as their sources say); the others count the FP8 cache their serving
#: stacks keep (one byte).
BF16_KV_PROFILES = frozenset({"llama31_70b", "llama31_8b", "gpt_oss_120b", "qwen3_32b", "qwen3_5_397b_a17b"})


@dataclass(frozen=True)
class KvRecipe:
    """Recipes of one model family and engine that set an FP8 KV cache."""

    #: Lower-case fragment of the row's ``model_path``.
    model: str
    backend: str
    #: Systems (``None``: every system the rows have for this family and engine).
    systems: tuple[str, ...] | None = None
    #: Row precisions (``None``: every one).
    precisions: tuple[str, ...] | None = None
    #: The setting is in the recipe on main from this day (``None``: from the recipe's start).
    since: str | None = None


FP8_KV_RECIPES: tuple[KvRecipe, ...] = (
    # 70b_fp8_{h100,h200,b200}, 70b_fp4_b200 (vLLM, October 2025) and their _trt twins.
    KvRecipe("llama-3.1-70b", "vllm"),
    KvRecipe("llama-3.1-70b", "trtllm"),
    # dsr1_fp{4,8}_{b200,b300}.sh (SGLang); dsr1_*_trt.sh on every system.
    KvRecipe("deepseek-r1", "sglang", ("b200_sxm", "b300_sxm")),
    KvRecipe("deepseek-v3", "sglang", ("b200_sxm", "b300_sxm")),
    KvRecipe("deepseek-r1", "trtllm"),
    KvRecipe("deepseek-v3", "trtllm"),
    KvRecipe("glm-5", "sglang", ("b200_sxm", "b300_sxm")),
    KvRecipe("qwen3.5", "sglang", None, ("fp8", "fp4")),
    KvRecipe("minimax-m2.5", "vllm", ("b300_sxm",)),
    KvRecipe("minimax-m2.5", "vllm", ("b200_sxm",), ("fp4",)),
    KvRecipe("minimax-m2.5", "vllm", ("b200_sxm",), ("fp8",), since="2026-04-03"),  # InferenceX #947
    KvRecipe("kimi-k2.5", "vllm", ("b200_sxm",), ("fp4",), since="2026-04-20"),
    KvRecipe("gpt-oss-120b", "vllm", ("b200_sxm",), since="2025-12-05"),  # InferenceX #273
    KvRecipe("gpt-oss-120b", "trtllm", ("b200_sxm",)),
)


def _applies(recipe: KvRecipe, row: dict) -> bool:
    name = str(row.get("model_path") or "").lower()
    if recipe.model not in name or str(row.get("backend") or "").strip() != recipe.backend:
        return False
    if recipe.systems is not None and str(row.get("system") or "").strip() not in recipe.systems:
        return False
    if recipe.precisions is not None and str(row.get("precision") or "").strip().lower() not in recipe.precisions:
        return False
    if recipe.since is not None:
        date = measured_date(row)
        return date is None or date >= recipe.since   # undated: the recipe as it stands
    return True


#: Row precision labels of the configurations aiconfigurator pairs with an FP8 KV cache (its
#: ``fp8``, ``fp8_static`` and ``nvfp4`` presets; ``mxfp4`` and ``bfloat16`` keep BF16).
_FP8_KV_LABELS = frozenset({"fp8", "fp8_block", "fp8_static", "fp4", "nvfp4"})


def generator_kv_cache(row: dict) -> str | None:
    """The KV-cache type aiconfigurator's generator launched an eval-harness ``row``'s engine
    with: ``"fp8"`` for an FP8 or NVFP4 configuration, else None (the engine's default).

    aiconfigurator's search gives those configurations an FP8 KV cache on Hopper and later
    (every system the rows and the hardware profiles have): its quantisation defaults and
    presets set ``kvcache_quant_mode: fp8`` beside an FP8 or NVFP4 GEMM mode (``sdk/task.py``
    since October 2025, the ``dense_default`` and ``moe_default`` templates before; its
    ``mxfp4`` preset keeps BF16), and its generator writes that mode into the engine's
    configuration: TensorRT-LLM's ``kv_cache_dtype`` from its first release
    (``cli/backends/trtllm.py``), vLLM's and SGLang's ``--kv-cache-dtype`` from the change that
    added those engines to it (ai-dynamo/aiconfigurator #144, December 2025), so every vLLM
    and SGLang row it launched had it too."""
    if client_protocol(row) is not FIXED_LENGTHS:
        return None
    return FP8 if str(row.get("precision") or "").strip().lower() in _FP8_KV_LABELS else None


def recipe_kv_cache(row: dict) -> str | None:
    """``serving.precision.kv_cache`` of the recipe that launched ``row``'s engine: ``"fp8"``
    where the recipe set it, None where it left the engine's default (or no recipe is known).
    An eval-harness row's recipe is aiconfigurator's generator (:func:`generator_kv_cache`)."""
    protocol = client_protocol(row)
    if protocol is FIXED_LENGTHS:
        return generator_kv_cache(row)
    if protocol is not INFERENCEX:
        return None
    return FP8 if any(_applies(recipe, row) for recipe in FP8_KV_RECIPES) else None


def kv_bytes_at(profile: str | None, kv_bytes_per_token: float, kv_cache: str | None) -> float:
    """KV bytes per token of model ``profile`` (whose figure is ``kv_bytes_per_token``) in a cache
    of type ``kv_cache``: half a BF16-counted profile's for FP8, else the figure unchanged."""
    if kv_cache == FP8 and profile in BF16_KV_PROFILES:
        return kv_bytes_per_token / 2
    return kv_bytes_per_token
