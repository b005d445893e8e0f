"""Measured serving-benchmark rows (the format of ``measured_runs.csv``) as scenarios.

Each row is one closed-loop benchmark of a real engine: ``batch_size`` clients, each sending a
request of ``isl`` random input tokens (no prefix reuse) and receiving ``osl`` output tokens,
then the next at once. :func:`row_scenario` builds the scenario that runs the same benchmark in
the simulator: the row's model, system, engine, precision and parallelism; one population agent
class of ``batch_size * attention_dp_size`` one-call sessions (``batch_size`` is per
attention-DP rank) with zero think time and no shared prefix, and the engine's ``max_num_seqs``
set to that concurrency as the benchmark launched it.

A ``mode: disagg`` row becomes a disaggregated scenario (prefill and decode pools from its
``prefill_*`` / ``decode_*`` columns; :mod:`agentsim.experiments.disaggregated_rows`). A row that
cannot be emulated raises :class:`RowSkipped` with the reason: models or systems without a
profile, or a disaggregated row without its pools (:data:`DISAGG_REASON`).
"""

from __future__ import annotations

import io
import json
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from agentsim.errors import InputError
from agentsim.hardware.profiles import load_catalogue
from agentsim.hardware.timing.deployment import canonical_model
from agentsim.input_files import read_input_text

REQUIRED_COLUMNS = ("id", "backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
                    "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "gemm_quant_mode",
                    "moe_quant_mode", "silicon_ttft_ms", "silicon_tpot_ms")
#: Engine step-token budget when a row does not give one (vLLM, SGLang and TRT-LLM defaults).
DEFAULT_BATCHED_TOKENS = 8192
#: Why a ``mode: disagg`` row is skipped: it lacks a pool's columns (the message adds which).
DISAGG_REASON = "disaggregated row without its pools"
#: Largest benchmark emulated (measured_runs.csv has at most 8,192 clients and 16K tokens per
#: request): bounds the memory and time one row can take.
MAX_CLIENTS = 65536
MAX_REQUEST_TOKENS = 1 << 20
#: Checkpoints whose architecture is another profile's (same layers, widths and experts): the
#: step time and the KV per token are that profile's; only the name differs.
SAME_ARCHITECTURE = {
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3.1": "deepseek-ai/DeepSeek-V3",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-32B-FP8": "Qwen/Qwen3-32B",
}
#: Hugging Face suffixes of quantised re-publications (``nvidia/DeepSeek-R1-NVFP4``).
_QUANT_SUFFIXES = ("-NVFP4", "-FP8", "-FP4")
#: Organisations that re-publish other organisations' checkpoints quantised.
_REPUBLISHERS = {"nvidia": {"DeepSeek": "deepseek-ai", "Qwen3": "Qwen", "Llama": "meta-llama", "GLM": "zai-org"}}


class RowSkipped(Exception):
    """This row cannot be emulated; the message says why."""


def _check_record_shape(text: str, path: Path) -> list[int]:
    """InputError for a header naming a column twice (pandas renames the second ``isl.1`` and
    the first is read without a word: which was meant?) or a record with fewer fields than the
    header (pandas fills the missing cells with NaN, later blamed on whichever column is checked
    first). Lines are the records' first lines, quoted newlines counted (``csv`` reader).

    Returns each non-empty record's first line, in the order pandas reads the rows (it skips
    blank lines), so a later check can name the line of row ``i`` as ``lines[i]``."""
    import csv

    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
        if header is None:
            return []
        seen: dict[str, int] = {}
        for index, name in enumerate(header, 1):
            name = name.strip().lstrip("\ufeff")
            if name and name in seen:
                raise InputError(f"column {name!r} appears twice in the header (columns {seen[name]} and {index}): "
                                 "which one is meant?", str(path), "line 1")
            seen[name] = index
        start = reader.line_num + 1
        lines: list[int] = []
        for record in reader:
            if record and len(record) < len(header):
                raise InputError(f"a row of {len(record)} fields under a header of {len(header)} columns "
                                 "(cut off, or written with another separator?)", str(path), f"line {start}")
            if record:
                lines.append(start)
            start = reader.line_num + 1
        return lines
    except csv.Error as exc:
        raise InputError(f"not a CSV file ({exc})", str(path), f"line {reader.line_num}") from None


def read_rows(path: Path) -> pd.DataFrame:
    """The rows of a measured-runs CSV; a clear InputError (file, line) for a missing file,
    a missing column, a non-positive number or a duplicate id."""
    # A regular file within the input budget: a pipe or a device must not hang the command.
    text = read_input_text(path, "CSV file")
    record_lines = _check_record_shape(text, path)
    try:
        frame = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"not a CSV file ({exc.__class__.__name__}: {str(exc).splitlines()[0][:120]})",
                         str(path)) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)} (the format of measured_runs.csv)", str(path), "line 1")
    if frame.empty:
        raise InputError("no rows below the header: nothing to compare", str(path))
    modes = frame["mode"].astype(str).str.strip()
    if not modes.isin(("agg", "disagg")).all():
        row = int((~modes.isin(("agg", "disagg"))).to_numpy().nonzero()[0][0])
        raise InputError(f"column mode must be agg or disagg, got {modes.iloc[row]!r}", str(path),
                         f"line {_line_of(record_lines, row)}")
    agg = modes == "agg"
    for column in ("isl", "osl", "batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms"):
        values = pd.to_numeric(frame[column], errors="coerce")
        # Disaggregated rows leave the aggregated parallelism columns empty.
        required = agg if column in ("batch_size", "tp_size") else pd.Series(True, index=frame.index)
        bad = (values.isna() & (frame[column].notna() | required)) | (values <= 0) | np.isinf(values)
        _refuse_first(frame, column, bad, "a positive number", path, record_lines)
        frame[column] = values
    # Counts (lengths, clients, parallel degrees, workers) are whole numbers: 1.5 would be
    # truncated to 1 without a word. Empty is allowed (the engine's default).
    for column in [c for c in frame.columns if c in ("isl", "osl", "batch_size") or c.endswith(("_size", "_num_workers"))]:
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = (values.isna() & frame[column].notna()) | np.isinf(values) | (values < 0) | (values % 1 != 0)
        _refuse_first(frame, column, bad & ~(values.isna() & frame[column].isna()), "a whole number", path,
                      record_lines)
    if frame["id"].duplicated().any():
        row = int(frame["id"].duplicated().to_numpy().nonzero()[0][0])
        raise InputError(f"duplicate id {frame['id'].iloc[row]!r}", str(path), f"line {_line_of(record_lines, row)}")
    return frame


def _line_of(record_lines: list[int], row: int) -> int:
    """The file line where data row ``row`` (0-based) starts: a quoted field may span lines."""
    return record_lines[row] if row < len(record_lines) else row + 2  # header is line 1


def _refuse_first(frame: pd.DataFrame, column: str, bad: pd.Series, what: str, path: Path,
                  record_lines: list[int]) -> None:
    """InputError naming the first row where ``bad`` holds (its line, the value as written)."""
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        got = frame[column].iloc[row]
        got = got.item() if hasattr(got, "item") else got  # 5, not np.int64(5)
        raise InputError(f"column {column} must be {what}, got {got!r}", str(path), f"line {_line_of(record_lines, row)}")


@lru_cache(maxsize=None)
def _profile_by_name(catalogue: str) -> dict[str, str]:
    """{Hugging Face id or system name: profile name} of a packaged catalogue."""
    key = "name" if catalogue == "models" else "system"
    return {str(fields[key]): profile for profile, fields in load_catalogue(catalogue).items() if fields.get(key)}


def _model_configs():
    """The directory of model configs aiconfigurator-core bundles (raises ModuleNotFoundError when
    the package is not installed)."""
    return resources.files("aiconfigurator_core").joinpath("model_configs")


@lru_cache(maxsize=None)
def _bundled_models() -> frozenset[str]:
    """Hugging Face ids aiconfigurator-core bundles a model config for (empty if not installed)."""
    try:
        configs = _model_configs()
        names = [entry.name for entry in configs.iterdir()]
    except (ModuleNotFoundError, FileNotFoundError):
        return frozenset()
    return frozenset(n[: -len("_config.json")].replace("--", "/", 1) for n in names
                     if n.endswith("_config.json") and not n.endswith("hf_quant_config.json"))


def base_model(model_path: str) -> str:
    """The original checkpoint a (possibly re-published, quantised) Hugging Face id derives from:
    ``nvidia/DeepSeek-R1-NVFP4`` -> ``deepseek-ai/DeepSeek-R1``."""
    org, _, name = model_path.partition("/")
    for suffix in _QUANT_SUFFIXES:
        if name.upper().endswith(suffix):
            name = name[: -len(suffix)]
            break
    for prefix, owner in _REPUBLISHERS.get(org, {}).items():
        if name.startswith(prefix):
            org = owner
            break
    return f"{org}/{name}" if name else model_path


def timing_model(model_path: str) -> str:
    """The id aiconfigurator-core times ``model_path`` by: its own config when bundled (a
    quantised re-publication carries its own quantisation config), else the base checkpoint's."""
    if model_path in _bundled_models():
        return model_path
    return canonical_model(base_model(model_path))


def model_profile(model_path: str) -> str | None:
    """The model profile (``agentsim/profiles/models.yaml``) of ``model_path``, or None."""
    models = _profile_by_name("models")
    for candidate in (model_path, base_model(model_path)):
        for name in (candidate, SAME_ARCHITECTURE.get(candidate), canonical_model(candidate)):
            if name and name in models:
                return models[name]
            twin = SAME_ARCHITECTURE.get(name or "")
            if twin and canonical_model(twin) in models:
                return models[canonical_model(twin)]
    return None


@lru_cache(maxsize=None)
def checkpoint_quantization(model_id: str) -> dict:
    """The ``quantization_config`` of aiconfigurator-core's bundled config of ``model_id`` (a
    multimodal checkpoint keeps it in its ``text_config``); empty when not bundled or none."""
    try:
        config = _model_configs().joinpath(f"{model_id.replace('/', '--', 1)}_config.json")
        raw = json.loads(config.read_text(encoding="utf-8"))
    except (ModuleNotFoundError, FileNotFoundError, OSError, ValueError):
        return {}
    quant = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    return quant if isinstance(quant, dict) else {}


def checkpoint_block_scaled_fp8(model_id: str) -> bool:
    """Whether aiconfigurator-core's bundled config of ``model_id`` is a block-scaled FP8
    checkpoint (``quantization_config``: ``quant_method: fp8`` with a ``weight_block_size``, as
    DeepSeek-V3/R1, Qwen3-*-FP8 and MiniMax-M2.5 publish theirs); False when not bundled."""
    quant = checkpoint_quantization(model_id)
    return str(quant.get("quant_method", "")).lower() == "fp8" and bool(quant.get("weight_block_size"))


def dense_precision(label: str | None, model_id: str) -> str | None:
    """The quantisation mode the dense GEMMs (attention projections, shared experts, dense
    MLPs) run for a row's precision ``label`` on the checkpoint ``model_id``.

    The rows write one label for the whole model. A compressed-tensors checkpoint quantises
    only what its ``ignore`` list leaves: Kimi-K2.5's native INT4 checkpoint (``int4``,
    ``group_size`` 32) ignores ``self_attn``, the shared experts and the dense MLP, so vLLM
    runs its routed experts through the W4A16 Marlin MoE kernel and every other GEMM in BF16.
    The category parse is aiconfigurator-core's own (``parse_compressed_tensors_quant``, which
    its model loader applies to such checkpoints). Any other checkpoint keeps the label."""
    quant = checkpoint_quantization(model_id)   # empty without the package
    if label is None or str(quant.get("quant_method", "")).lower() != "compressed-tensors":
        return label
    from aiconfigurator_core.sdk.utils import parse_compressed_tensors_quant

    base, ignored = parse_compressed_tensors_quant(quant)
    return "bfloat16" if base == label and "attention" in ignored else label


def expert_precision(label: str | None, model_id: str) -> str | None:
    """The quantisation mode the expert (MoE) kernels run for a row's precision ``label`` on the
    checkpoint ``model_id``. The rows write ``fp8`` for the FP8 family; an engine serving a
    block-scaled FP8 checkpoint runs its block-scaled expert kernels (the scales are in the
    weights; aiconfigurator-core reads such a config as ``fp8_block`` too), and the databases'
    per-tensor FP8 expert kernels are other code (vLLM's on Hopper: the ModelOpt FlashInfer
    path, 0.99 ms for 32 tokens of Qwen3-235B's experts on H200 against 0.18 ms block-scaled).

    Dense GEMMs keep the label: their FP8 rate is the same either way, and vLLM's block-scaled
    GEMM data carries a per-call floor (0.17-0.27 ms at one token on B200, 0.06 ms on H200,
    against 9 us per-tensor) that a CUDA-graph decode step does not pay."""
    if label == "fp8" and checkpoint_block_scaled_fp8(model_id):
        return "fp8_block"
    return label


def _int(value, default: int | None = None) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return int(value)


def _quant(value) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or not str(value).strip():
        return None
    return str(value).strip()


def launched_parallelism(tp: int, attention_dp: int, moe_ep: int | None) -> tuple[int, int, int] | None:
    """``(tp, attention_dp, moe_ep)`` of the deployment a row with these columns launched, when
    the columns multiplied the expert-parallel width into the GPU count; None when they describe
    it as they are.

    InferenceX configures an aggregated deployment by its GPU count ``G`` (its ``tp``), its
    expert-parallel width (``ep``, experts over all ``G`` GPUs) and whether attention runs
    data-parallel. Some of the exported rows of ``measured_runs.csv`` write ``G * ep`` GPUs
    instead of ``G``: TP8/EP8 as ``tp 64, ep 8``, DEP8 as ``attention_dp 64, ep 8``, TP4/EP4
    with attention DP as ``tp 4, attention_dp 4, ep 16`` (the rows whose ids carry the
    configuration, ``..._tp8_ep8_...``, say which: the 153 of them written so match a rule
    below and give the id's GPU count and expert width; the rules leave the other 1,473 alone).
    Two signatures, each impossible as a deployment of one 8-GPU node or inconsistent with its
    own expert split: ``tp * attention_dp == ep**2`` (``G = ep``) and ``tp == attention_dp``
    with ``ep == tp * attention_dp`` (``G = tp``). The deployment is then ``G`` GPUs with
    experts over all of them: attention DP over ``G`` ranks of TP 1 when the row has attention
    DP, else TP ``G``."""
    if not moe_ep or moe_ep <= 1:
        return None
    if tp * attention_dp == moe_ep * moe_ep:
        gpus = moe_ep
    elif tp == attention_dp > 1 and moe_ep == tp * attention_dp:
        gpus = tp
    else:
        return None
    return (1, gpus, gpus) if attention_dp > 1 else (gpus, 1, gpus)


def row_scenario(row: dict) -> dict:
    """The scenario mapping that emulates ``row`` (raises RowSkipped); the caller sets
    ``duration_s`` and the engine's KV capacity."""
    if str(row["mode"]).strip() != "agg":
        # Prefill and decode pools from the prefill_* / decode_* columns, the rest as for an
        # aggregated row (agentsim.experiments.disaggregated_rows).
        from agentsim.experiments.disaggregated_rows import DisaggRowError, disaggregated_row_scenario

        try:
            return disaggregated_row_scenario(row, row_scenario)
        except DisaggRowError as why:
            raise RowSkipped(f"{DISAGG_REASON}: {why}") from None
    model_path = str(row["model_path"]).strip()
    profile = model_profile(model_path)
    if profile is None:
        raise RowSkipped(f"model {model_path} has no model profile (agentsim/profiles/models.yaml)")
    hardware_profile = _profile_by_name("hardware").get(str(row["system"]).strip())
    if hardware_profile is None:
        raise RowSkipped(f"system {row['system']} has no hardware profile (agentsim/profiles/hardware.yaml)")
    # Empty or 0 (some rows write 0 for "not used") is the engine's default of 1.
    tp, pp, dp = (_int(row.get(c)) or 1 for c in ("tp_size", "pp_size", "attention_dp_size"))
    # ``batch_size`` is per attention-data-parallel rank (the benchmark's concurrency, given in
    # ``silicon_data_source``, is ``batch_size * attention_dp_size`` on every such row).
    clients, isl, osl = _int(row["batch_size"]) * dp, _int(row["isl"]), _int(row["osl"])
    moe_ep = _int(row.get("moe_ep_size"))
    launched = launched_parallelism(tp, dp, moe_ep)
    if launched is not None:
        tp, dp, moe_ep = launched
    if clients > MAX_CLIENTS or isl + osl > MAX_REQUEST_TOKENS:
        raise RowSkipped(f"{clients:,} clients of {isl:,} + {osl:,} tokens is beyond what check-timing emulates "
                         f"(at most {MAX_CLIENTS:,} clients and {MAX_REQUEST_TOKENS:,} tokens per request)")
    gemm, moe = _quant(row.get("gemm_quant_mode")), _quant(row.get("moe_quant_mode"))
    precision_name = str(row.get("precision") or "").strip().lower()
    if gemm is None and precision_name == "bf16":
        gemm = moe = "bfloat16"
    parallelism = {"tp": tp, "pp": pp, "attention_dp": dp}
    for column, key in (("moe_tp_size", "moe_tp"), ("moe_ep_size", "moe_ep")):
        value = _int(row.get(column))
        if launched is not None:
            value = moe_ep if key == "moe_ep" else 1   # experts spread over every GPU, as launched
        if value:  # empty or 0: the default split
            parallelism[key] = value
    timed_as = timing_model(model_path)
    gemm, moe = dense_precision(gemm, timed_as), expert_precision(moe, timed_as)
    precision = {k: v for k, v in (("weights", gemm), ("moe", moe)) if v is not None}
    # The weights' bytes follow the precision (agentsim.config.weights).
    model = {"profile": profile, "name": timed_as}
    return {
        "name": f"check-timing {row['id']}",
        "seed": 0,
        "duration_s": 1.0,  # set by the caller from the expected request time
        "hardware": {"profile": hardware_profile, "gpus_per_instance": tp * pp * dp, "instances": 1},
        "model": model,
        "cache": {"block_tokens": 16, "eviction": "lru"},
        "serving": {"engine": str(row["backend"]).strip(), "max_num_seqs": max(clients, 1),
                    "max_num_batched_tokens": DEFAULT_BATCHED_TOKENS, "parallelism": parallelism,
                    "precision": precision, "router": "round_robin"},
        "workload": {"global_system_prompt_tokens": 0, "agent_classes": {"client": {
            "arrival": {"kind": "population", "concurrent": clients, "ramp_s": 0, "restart_delay_s": 0},
            "tools_prefix_tokens": 0, "initial_context_tokens": isl, "calls_per_session": 1,
            "tool_gap_s": 0, "human_turn_probability": 0, "appended_tokens": 0, "output_tokens": osl,
            "max_context_tokens": isl + osl + 16}}},
        # Only TTFT and TPOT are read: no replay through Belady, no recompute split.
        "run": {"belady_headroom": False, "recompute_split": False, "progress_interval_s": 1e9},
    }
