"""A disaggregated row without its pools takes them from its twin: the same run in the file's
other export (agentsim.experiments.twin_rows)."""

from __future__ import annotations

import math

import pandas as pd

from agentsim.experiments.disaggregated_rows import pools_description, row_deployment
from agentsim.experiments.twin_rows import POOL_COLUMNS, TWIN_COLUMN, with_twin_pools

# Two exports of one run of DeepSeek-R1 FP8 on H200 (TensorRT-LLM, 28 clients of 8k/1k), as in
# measured_runs.csv: the results-table row leaves the workers empty, the database row gives them
# (and labels the model by its architecture). No InferenceX recipe has this concurrency.
SOURCE = {"id": "table_c28", "mode": "disagg", "system": "h200_sxm", "backend": "trtllm", "precision": "fp8",
          "model_path": "deepseek-ai/DeepSeek-R1", "isl": 8192, "osl": 1024,
          "silicon_ttft_ms": 1094.7591652727820, "silicon_tpot_ms": 13.797397159123,
          "silicon_data_source": "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=28; "
                                 "measured=2026-03-23T13:00:07Z",
          "prefill_tp_size": 8, "prefill_moe_ep_size": 8, "decode_tp_size": 8, "decode_moe_ep_size": 8}
DUMP = {"id": "dump_c28", "mode": "disagg", "system": "h200_sxm", "backend": "trtllm", "precision": "fp8",
        "model_path": "deepseek-ai/DeepSeek-V3", "isl": 8192, "osl": 1024,
        "silicon_ttft_ms": 1094.759165272782, "silicon_tpot_ms": 13.7973971591233,
        "silicon_data_source": "db-dump/2026-04-27; config_id=297; silicon_concurrency=28; measured=2026-03-23T00:00:00.000Z",
        "prefill_num_workers": 1, "prefill_tp_size": 8, "prefill_pp_size": 1, "prefill_attention_dp_size": 1,
        "prefill_moe_tp_size": 1, "prefill_moe_ep_size": 8, "decode_num_workers": 7, "decode_batch_size": 4,
        "decode_tp_size": 8, "decode_pp_size": 1, "decode_attention_dp_size": 1, "decode_moe_tp_size": 1,
        "decode_moe_ep_size": 8}


def _frame(*rows):
    frame = pd.DataFrame(list(rows))
    for column in POOL_COLUMNS:
        if column not in frame.columns:
            frame[column] = math.nan
    return frame


def test_a_row_without_pools_takes_its_twins():
    out = with_twin_pools(_frame(SOURCE, DUMP)).set_index("id")
    row = out.loc["table_c28"].to_dict()
    assert row[TWIN_COLUMN] == "dump_c28"
    columns = list(POOL_COLUMNS)
    assert out.loc["table_c28", columns].astype(float).equals(out.loc["dump_c28", columns].astype(float))
    assert pools_description({**row, "id": "table_c28"}) == "twin row"
    prefill, decode, draft = row_deployment(row, 28)
    assert (prefill["workers"], decode["workers"], draft) == (1, 7, None)
    # The twin itself and its pools are unchanged.
    assert pd.isna(out.loc["dump_c28", TWIN_COLUMN])


def test_no_twin_no_change():
    other_run = {**DUMP, "silicon_ttft_ms": 1094.76}            # a different measurement
    out = with_twin_pools(_frame(SOURCE, other_run)).set_index("id")
    assert pd.isna(out.loc["table_c28", "prefill_num_workers"])
    other_clients = {**DUMP, "silicon_data_source": DUMP["silicon_data_source"].replace("=28;", "=32;")}
    out = with_twin_pools(_frame(SOURCE, other_clients)).set_index("id")
    assert pd.isna(out.loc["table_c28", "prefill_num_workers"])
    # Twins that disagree on the deployment say nothing.
    third = {**DUMP, "id": "dump_c28_b", "decode_num_workers": 5}
    out = with_twin_pools(_frame(SOURCE, DUMP, third)).set_index("id")
    assert pd.isna(out.loc["table_c28", "prefill_num_workers"])


def test_a_row_its_recipe_gives_is_left_to_the_recipe():
    # 16 clients of 1k/1k: InferenceX's recipe of that date has the deployment (with MTP).
    source = {**SOURCE, "isl": 1024, "osl": 1024, "silicon_data_source": SOURCE["silicon_data_source"].replace(
        "silicon_concurrency=28", "silicon_concurrency=16").replace("2026-03-23T13:00:07Z", "2026-02-01T00:00:00Z")}
    dump = {**DUMP, "isl": 1024, "osl": 1024, "silicon_data_source": DUMP["silicon_data_source"].replace("=28;", "=16;")}
    out = with_twin_pools(_frame(source, dump)).set_index("id")
    assert pd.isna(out.loc["table_c28", "prefill_num_workers"])
    assert pools_description(out.loc["table_c28"].to_dict()).startswith("recipe")
