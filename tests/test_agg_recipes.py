"""Which aggregated InferenceX rows ran MTP: the benchmark entries that fit what a row says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from agentsim.experiments.agg_recipes import fitting_entries, recipe_speculation
from agentsim.experiments.benchmark_recipes import row_image

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "inferencex_agg_recipes.py"


def _qwen_row(**changes) -> dict:
    """An InferenceX row of Qwen3.5-397B FP8 on B200 with SGLang, as the 2026-03-25 export writes one."""
    row = {"id": "q", "backend": "sglang", "backend_version": "0.5.9", "model_path": "Qwen/Qwen3.5-397B-A17B",
           "system": "b200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 1024,
           "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8_block", "batch_size": 16.0,
           "tp_size": 4.0, "pp_size": 1.0, "attention_dp_size": 1.0, "moe_tp_size": 4.0, "moe_ep_size": 1.0,
           "silicon_data_source": "source_file=2026-03-25.csv; model=Qwen3.5-397B; silicon_concurrency=16; "
                                  "measured=2026-03-20T22:08:23Z; wip=False; image=lmsysorg/sglang:v0.5.9-cu130"}
    row.update(changes)
    return row


def test_a_deployment_only_the_mtp_entry_has_ran_mtp_at_the_scripts_depth():
    # March 2026: TP 4 without expert parallelism is only in qwen3.5-fp8-b200-sglang-mtp
    # (SPECULATIVE_NUM_STEPS=3); the plain entry runs TP 8, or TP 4 with EP 4.
    found = recipe_speculation(_qwen_row(), 16)
    assert found is not None and found["draft_tokens"] == 3 and found["config"].endswith("-mtp")


def _amd64(row: dict) -> dict:
    return {**row, "silicon_data_source": row["silicon_data_source"].replace("cu130", "cu130-amd64")}


def test_a_deployment_a_plain_entry_has_is_emulated_without_mtp():
    plain = _amd64(_qwen_row(moe_ep_size=4.0))          # TP 4 with EP 4, the plain entry's image
    assert not fitting_entries(plain, 16).empty and recipe_speculation(plain, 16) is None


def test_the_image_and_the_concurrency_must_fit():
    assert recipe_speculation(_amd64(_qwen_row()), 16) is None   # the plain entry's image: no MTP entry fits
    assert fitting_entries(_qwen_row(), 1024).empty        # beyond every entry's range


def test_rows_of_other_benchmarks_are_not_matched():
    eval_row = _qwen_row(silicon_data_source="source_file=/Users/x/aic-auto-gap-analysis/data/b200_sxm/sglang/q.csv")
    assert recipe_speculation(eval_row, 16) is None and fitting_entries(eval_row, 16).empty


def test_images_are_read_from_both_export_formats():
    assert row_image(_qwen_row()) == "lmsysorg/sglang:v0.5.9-cu130"
    dump = {"silicon_data_source": "db-dump/2026-04-27; config_id=615; silicon_concurrency=4; "
                                   "measured=2026-03-24T00:00:00.000Z; workflow_run_id=336; lmsysorg/sglang:v0.5.9-cu130-amd64"}
    assert row_image(dump) == "lmsysorg/sglang:v0.5.9-cu130-amd64"
    enroot = {"silicon_data_source": "model=DeepSeek-R1; image=nvcr.io#nvidia/tensorrt-llm/release:1.1.0rc2.post2"}
    assert row_image(enroot) == "nvcr.io/nvidia/tensorrt-llm/release:1.1.0rc2.post2"
    assert row_image({"silicon_data_source": "db-dump/2026-04-27; config_id=1"}) is None


def _script_module():
    sys.path.insert(0, str(SCRIPT.parent))        # the scripts import their shared module
    spec = importlib.util.spec_from_file_location("inferencex_agg_recipes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_depth_is_read_from_the_branch_the_entry_ran():
    draft_depth = _script_module().draft_depth
    trt = 'MOE_BACKEND="TRTLLM"\nMTP=3\n\nif [[ "$DP_ATTENTION" == "true" ]]; then\n    MOE_BACKEND="CUTLASS"\n    MTP=1\nfi\n'
    assert draft_depth(trt, "trt", dp_attn=False) == 3 and draft_depth(trt, "trt", dp_attn=True) == 1
    h200 = 'if [[ "$DP_ATTENTION" == "true" ]]; then\n    MTP=1\nelse\n    MTP=3\nfi\n'
    assert draft_depth(h200, "trt", dp_attn=False) == 3 and draft_depth(h200, "trt", dp_attn=True) == 1
    sglang = "SPECULATIVE_NUM_STEPS=2\nSPECULATIVE_DRAFT_TOKENS=3\n--speculative-num-steps $SPECULATIVE_NUM_STEPS"
    assert draft_depth(sglang, "sglang", dp_attn=False) == 2
    assert draft_depth("echo no speculation", "sglang", dp_attn=False) is None


def test_check_timing_emulates_a_row_that_ran_mtp_with_it():
    from agentsim.experiments.timing_check import emulate_row

    measured = {"silicon_ttft_ms": 600.0, "silicon_tpot_ms": 10.0, "batch_size": 4.0,
                "silicon_data_source": _qwen_row()["silicon_data_source"].replace("concurrency=16", "concurrency=4")}
    mtp = emulate_row(_qwen_row(**measured))
    plain = emulate_row(_amd64(_qwen_row(**measured)))
    assert mtp.skipped is None and plain.skipped is None
    assert mtp.draft_tokens == 3 and plain.draft_tokens is None
    # 2.1 tokens an iteration of a 4-token verify: each output token costs well under one step.
    assert mtp.predicted_tpot_ms < 0.75 * plain.predicted_tpot_ms


def test_agg_rows_on_a_system_inferencex_only_ran_disaggregated_are_not_workers():
    """InferenceX's export labels some GB200 runs ``agg`` with the deployment's GPUs as tp (20 to
    72); InferenceX never benchmarked GB200 aggregated, so those rows describe no worker."""
    from agentsim.experiments.agg_recipes import disaggregated_only_reason

    gb200 = _qwen_row(system="gb200", model_path="deepseek-ai/DeepSeek-R1", tp_size=24.0, moe_ep_size=1.0,
                      silicon_data_source="source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=2150; "
                                          "measured=2026-02-05T00:00:00.000Z; wip=False")
    assert "only disaggregated" in disaggregated_only_reason(gb200) and "tp 24" in disaggregated_only_reason(gb200)
    assert disaggregated_only_reason(_qwen_row()) is None               # B200: single-node entries exist
    eval_row = {**gb200, "silicon_data_source": "source_file=/Users/x/aic-auto-gap-analysis/data/gb200/trtllm/a.csv"}
    assert disaggregated_only_reason(eval_row) is None                  # aiconfigurator's own aggregated runs
    assert disaggregated_only_reason({**gb200, "mode": "disagg"}) is None
