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
"""

from __future__ import annotations

from dataclasses import dataclass

from agentsim.experiments.benchmark_clients import INFERENCEX, client_protocol


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


def _recipe(row: dict, tp: int) -> SglangRecipe | None:
    name = str(row.get("model_path") or "").lower()
    family = next((f for fragment, f in _FAMILIES.items() if fragment in name), None)
    key = (family, str(row.get("system") or "").strip(), str(row.get("precision") or "").strip().lower())
    return RECIPES.get((*key, tp)) or RECIPES.get((*key, None))


def recipe_serving(row: dict, clients: int, tp: int) -> dict:
    """``serving`` settings of the recipe that launched ``row``'s SGLang server ({} if none
    applies): ``scheduler_recv_interval`` (for ``clients``, the benchmark's concurrency) and
    ``max_num_batched_tokens``."""
    if str(row.get("backend") or "").strip() != "sglang" or client_protocol(row) is not INFERENCEX:
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
