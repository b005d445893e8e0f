"""The deployments of the ``source_file=`` disaggregated rows, from InferenceX's benchmark recipes.

906 ``mode: disagg`` rows of ``measured_runs.csv`` (those whose ``silicon_data_source`` starts
``source_file=``) are InferenceX runs of Dynamo disaggregated deployments. Their export keeps
each pool's ``tp_size`` and the prefill pool's expert split, but leaves ``prefill_num_workers``,
``decode_num_workers`` and the batch sizes empty, writes ``attention_dp_size`` 1 on every row
and copies the prefill pool's ``moe_ep_size`` into the decode pool's. What the run deployed is
in InferenceX's ``nvidia-master.yaml``: one ``search-space`` entry per deployment, with each
pool's ``num-worker``, ``tp``, ``ep`` and ``dp-attn``, the ``spec-decoding`` mode and the
``conc-list`` it was run at. ``agentsim/data/inferencex_disagg_recipes.csv`` holds every such
entry of every version of that file up to the measured-runs dump
(``scripts/inferencex_disagg_recipes.py`` writes it).

:func:`recipe_pools` finds a row's entry by what the row does say: model, system, engine,
precision, ``isl``/``osl``, the concurrency (``silicon_concurrency``), the prefill pool's TP and
expert split and the decode pool's TP. When several versions or entries match, the one in force
on the row's ``measured=`` date is taken (else the first one after it: a run made before its
recipe was merged). A row that matches only entries running speculative decoding
(``spec-decoding: mtp``) is emulated with MTP (``serving.speculative_decoding``, its depth from the
recipe file, :func:`draft_tokens`). Where the row names its container image and some fitting
entry ran that image, only those entries count: MTP and plain runs of one deployment were often
made on different images. A row that still matches both an MTP entry and one without, or
several deployments of one version, is emulated as the first one without MTP and marked
``ambiguous``.

A pool's worker is ``tp`` GPUs; with ``dp-attn`` its attention runs ``tp`` data-parallel ranks
(TP 1 each); either way its experts are split ``ep``-way by expert and ``tp / ep``-way by
tensor (so ``tp 4, ep 1`` runs TP-4 experts). The decode worker's most sequences is the recipe's
``batchN`` (TensorRT-LLM's ``max_batch_size``, per attention-DP rank) when its file name gives
one, else the clients spread evenly over the decode workers (every client holds a slot, as the
benchmark's concurrency is chosen to fit). That assumption is what a row's TPOT tests: the
decode step time at that batch is what TPOT measures.

The rows of the database dump give their pools (worker counts, parallelism) but their
``decode_batch_size`` is the clients spread over the decode workers, not the engine's
``max_batch_size``: :func:`recipe_decode_batch` finds the recipe entry of the same deployment at
the row's concurrency, whose ``batchN`` is the cap the decode workers ran with. Where it is
below the clients' share the excess clients wait for a decode slot, which the benchmark counts
in TTFT (cfg388, 192 clients on 4 decode workers of ``batch32``: 128 slots).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from importlib import resources

import pandas as pd

from agentsim.experiments.benchmark_recipes import row_image

#: InferenceX runner name (before ``-multinode``/``-slurm``) -> the rows' ``system``.
RUNNER_SYSTEMS = {"gb200": "gb200", "gb300": "gb300", "b200": "b200_sxm", "b300": "b300_sxm",
            "h200": "h200_sxm", "h100": "h100_sxm"}
_BACKENDS = {"dynamo-trt": "trtllm", "dynamo-sglang": "sglang", "dynamo-vllm": "vllm"}
#: InferenceX ``model-prefix`` -> ``model=`` of the rows' ``silicon_data_source``.
_MODELS = {"dsr1": "DeepSeek-R1", "dsr1-fp8": "DeepSeek-R1", "DeepSeek-R1-0528": "DeepSeek-R1",
           "gptoss": "GPT-OSS-120B", "kimik2.5": "Kimi-K2.5", "glm5": "GLM-5"}
_FIELD = {name: re.compile(rf"{name}=([^;]+)") for name in ("model", "measured", "silicon_concurrency")}
#: InferenceX's benchmark (srt-slurm's sa-bench, as its ``bench.sh`` runs it): a warm-up run of
#: its own, then ``10 x concurrency`` prompts at once (``--request-rate inf
#: --max-concurrency C``), every one of them in the reported means, the first burst included;
#: prompt and output lengths uniform in ``[0.8 x isl, isl]`` and ``[0.8 x osl, osl]``
#: (``--random-range-ratio 0.8``, SGLang's bench_serving semantics). The ``10 x concurrency``
#: is ``benchmark_clients.MEASURED_REQUESTS_PER_CLIENT``, which check-timing averages over.
SA_BENCH_RANGE_RATIO = 0.8
#: Why a row's pools are not rebuilt when its columns give a deployment's size, not a worker's.
DEPLOYMENT_COLUMNS_REASON = ("prefill and decode columns give the deployment's GPUs (tp {tp} with attention_dp 1 "
                             "and no expert split on both pools), not one worker's, and no recipe matches")


#: The columns that make one deployment (two recipe rows with these equal deploy the same).
_DEPLOYMENT = ("prefill_workers", "prefill_tp", "prefill_ep", "prefill_dp_attn", "decode_workers", "decode_tp",
               "decode_ep", "decode_dp_attn", "decode_batch")


#: ``model_path`` of the database dump's rows -> the recipes' ``model`` (the dump writes
#: DeepSeek-V3's path for InferenceX's ``dsr1`` runs, the same architecture).
_DUMP_MODELS = {"deepseek-ai/DeepSeek-V3": "DeepSeek-R1", "deepseek-ai/DeepSeek-R1": "DeepSeek-R1",
                "deepseek-ai/DeepSeek-R1-0528": "DeepSeek-R1", "moonshotai/Kimi-K2.5": "Kimi-K2.5",
                "openai/gpt-oss-120b": "GPT-OSS-120B"}


_MTP_DEPTH = re.compile(r"mtp(\d+)")
#: MTP depth when a recipe's file does not give it: aiconfigurator's default for DeepSeek-V3/R1
#: and Kimi-K2.5 (``default_nextn_for_architecture``: 1).
DEFAULT_DRAFT_TOKENS = 1


class RecipeError(ValueError):
    """No recipe gives this row's deployment; the message says why."""


@lru_cache(maxsize=1)
def recipes() -> pd.DataFrame:
    """Every recipe entry (one row per deployment and concurrency), keyed as the rows are."""
    text = resources.files("agentsim").joinpath("data/inferencex_disagg_recipes.csv").open().read()
    import io

    frame = pd.read_csv(io.StringIO(text), comment="#")
    frame["system"] = frame["runner"].str.split("-").str[0].map(RUNNER_SYSTEMS)
    frame["backend"] = frame["framework"].map(_BACKENDS)
    frame["model"] = frame["model_prefix"].map(_MODELS)
    frame["date"] = frame["date"].astype(str)
    # A pool of no workers is not a deployment (a few entries of early versions).
    return frame[(frame["prefill_workers"] > 0) & (frame["decode_workers"] > 0)].reset_index(drop=True)


def _field(row: dict, name: str) -> str | None:
    found = _FIELD[name].search(str(row.get("silicon_data_source") or ""))
    return found.group(1).strip() if found else None


def _number(value) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == "":
        return None
    return float(value)


def _pool(workers: int, tp: int, ep: int, dp_attn: bool, max_seqs: int | None) -> dict:
    # The experts are split over all ``tp`` GPUs either way, ``ep``-way by expert and the rest by
    # tensor (TensorRT-LLM's Mapping and SGLang both take moe_tp = tp / ep): a DP worker of
    # ``tp 4, ep 1`` runs TP-4 experts, not one whole copy of them per GPU.
    moe = {"moe_tp": max(1, tp // ep), "moe_ep": ep}
    parallelism = ({"tp": 1, "pp": 1, "attention_dp": tp, **moe} if dp_attn
                   else {"tp": tp, "pp": 1, "attention_dp": 1, **moe})
    entry = {"workers": workers, "gpus_per_worker": tp, "parallelism": parallelism}
    if max_seqs:
        entry["max_num_seqs"] = max_seqs
    return entry


def draft_tokens(recipe) -> int:
    """MTP draft tokens of a recipe entry with ``spec-decoding: mtp``: the ``mtpN`` of its
    TensorRT-LLM recipe file (``..._eplb0_mtp3.yaml``: ``num_nextn_predict_layers: 3``), else
    aiconfigurator's default depth for DeepSeek models (:data:`DEFAULT_DRAFT_TOKENS`)."""
    found = _MTP_DEPTH.search(str(recipe).rsplit("/", 1)[-1]) if isinstance(recipe, str) else None
    return (int(found.group(1)) if found else 0) or DEFAULT_DRAFT_TOKENS


def recipe_pools(row: dict, clients: int) -> tuple[dict, dict, dict]:
    """``(prefill pool, decode pool, what was matched)`` for a row without worker counts, the
    pools in the form of ``serving.disaggregation``; RecipeError when no recipe fits."""
    model, measured = _field(row, "model"), (_field(row, "measured") or "")[:10]
    key = {"system": str(row.get("system")).strip(), "backend": str(row.get("backend")).strip(), "model": model,
           "precision": str(row.get("precision")).strip(), "isl": _number(row.get("isl")),
           "osl": _number(row.get("osl")), "concurrency": clients,
           "prefill_tp": _number(row.get("prefill_tp_size")), "prefill_ep": _number(row.get("prefill_moe_ep_size")),
           "decode_tp": _number(row.get("decode_tp_size"))}
    table = recipes()
    found = table
    for column, value in key.items():
        found = found[found[column] == value]
    # Early SGLang entries write "tp 1, ep 1, dp-attn" for every pool (the deployment was in the
    # recipe file): attention DP over one rank describes no worker.
    placeholder = (((found["prefill_tp"] == 1) & found["prefill_dp_attn"])
                   | ((found["decode_tp"] == 1) & found["decode_dp_attn"]))
    if not found.empty and placeholder.all():
        raise RecipeError("the matching InferenceX entries give no parallelism (tp 1 with attention DP, "
                          "the deployment was in their recipe files)")
    found = found[~placeholder]
    # The entries of the image the row names, when any has it: InferenceX often benchmarks a
    # deployment with and without MTP on different images (a run from a branch whose entry never
    # reached the file names an image no entry has; then every fitting entry is kept).
    image = row_image(row)
    same_image = found[found["image"] == image] if image is not None else found.iloc[0:0]
    if not same_image.empty:
        found = same_image
    if found.empty:
        tp = key["prefill_tp"]
        if (tp is not None and tp >= 12 and tp == key["decode_tp"] and key["prefill_ep"] == 1
                and _number(row.get("prefill_attention_dp_size")) in (None, 1.0)):
            raise RecipeError(DEPLOYMENT_COLUMNS_REASON.format(tp=int(tp)))
        raise RecipeError(f"no InferenceX recipe for {model} {key['precision']} on {key['system']} with {key['backend']}, "
                          f"{int(key['isl'] or 0)}/{int(key['osl'] or 0)} tokens, {clients} clients, prefill tp "
                          f"{int(key['prefill_tp'] or 0)} ep {int(key['prefill_ep'] or 0)}, decode tp {int(key['decode_tp'] or 0)}")
    plain = found[found["spec_decoding"] == "none"]
    # Only MTP entries fit: the row ran with MTP and is emulated so (serving.speculative_decoding).
    candidates = plain if not plain.empty else found
    # The version in force when the row was measured, else the first one after it.
    in_force = _in_force(candidates, measured).drop_duplicates(list(_DEPLOYMENT))
    # Several deployments of one version (or one with MTP) fit what the row says: the first is
    # taken, and the row is reported as ambiguous.
    ambiguous = len(in_force) > 1 or len(candidates) < len(found)
    chosen = in_force.iloc[0]
    batch = _number(chosen["decode_batch"])
    decode_workers = int(chosen["decode_workers"])
    decode_ranks = int(chosen["decode_tp"]) if bool(chosen["decode_dp_attn"]) else 1
    decode_seqs = int(batch) * decode_ranks if batch else math.ceil(clients / decode_workers)
    prefill = _pool(int(chosen["prefill_workers"]), int(chosen["prefill_tp"]), int(chosen["prefill_ep"]),
                    bool(chosen["prefill_dp_attn"]), None)
    decode = _pool(decode_workers, int(chosen["decode_tp"]), int(chosen["decode_ep"]), bool(chosen["decode_dp_attn"]),
                   decode_seqs)
    info = {"config": chosen["config"], "commit": chosen["commit"], "recipe": chosen["recipe"],
            "ambiguous": ambiguous, "decode_batch_from": "recipe" if batch else "clients / decode workers",
            "draft_tokens": draft_tokens(chosen["recipe"]) if chosen["spec_decoding"] != "none" else None}
    return prefill, decode, info


def _in_force(candidates: pd.DataFrame, measured: str) -> pd.DataFrame:
    """The entries of the version in force on ``measured`` (a date), else of the first after it."""
    before = candidates[candidates["date"] <= measured] if measured else candidates.iloc[0:0]
    commit = before.iloc[-1]["commit"] if not before.empty else candidates.iloc[0]["commit"]
    return candidates[candidates["commit"] == commit]


def recipe_decode_batch(row: dict, clients: int, prefill: dict, decode: dict) -> int | None:
    """The most sequences per decode worker (TensorRT-LLM's ``max_batch_size`` x attention-DP
    ranks) of the recipe that ran ``row``'s deployment at its concurrency, for a row that gives
    its pools (``prefill``/``decode``: the pools its columns build); None when no recipe entry
    of that deployment names a batch. Entries without MTP are preferred (the pools' TPOT shows
    no MTP), then the version in force on the row's ``measured=`` date."""
    model = _DUMP_MODELS.get(str(row.get("model_path")).strip()) or _field(row, "model")
    found = recipes()
    key = {"system": str(row.get("system")).strip(), "backend": str(row.get("backend")).strip(), "model": model,
           "precision": str(row.get("precision")).strip(), "isl": _number(row.get("isl")),
           "osl": _number(row.get("osl")), "concurrency": clients}
    for role, pool in (("prefill", prefill), ("decode", decode)):
        ranks = pool["parallelism"].get("attention_dp", 1)
        key.update({f"{role}_workers": pool["workers"], f"{role}_tp": pool["gpus_per_worker"],
                    f"{role}_dp_attn": ranks > 1})
    for column, value in key.items():
        found = found[found[column] == value]
    found = found[found["decode_batch"].notna()]
    if found.empty:
        return None
    plain = found[found["spec_decoding"] == "none"]
    chosen = _in_force(plain if not plain.empty else found, (_field(row, "measured") or "")[:10]).iloc[0]
    return int(chosen["decode_batch"]) * decode["parallelism"].get("attention_dp", 1)
