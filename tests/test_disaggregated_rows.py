"""``mode: disagg`` rows of measured_runs.csv become disaggregated scenarios that run."""

from __future__ import annotations

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario
from agentsim.experiments.disaggregated_rows import (INFERENCEX_PREFILL_RANK_TOKENS, DisaggRowError, concurrency,
                                                      disaggregated_row_scenario)

# A disaggregated row as measured_runs.csv spells it (dsr1_gb300_trtllm_fp8_disagg_8192x1024_c36_cfg392).
ROW = {"id": "dsr1_gb300_trtllm_fp8_disagg_8192x1024_c36_cfg392", "backend": "trtllm", "system": "gb300",
       "precision": "fp8", "model_path": "deepseek-ai/DeepSeek-R1", "mode": "disagg", "isl": 8192, "osl": 1024,
       "silicon_data_source": "db-dump/2026-04-27; config_id=392; silicon_concurrency=36; measured=2026-02-05",
       "batch_size": float("nan"), "tp_size": float("nan"),
       "prefill_batch_size": 1.0, "prefill_num_workers": 1.0, "prefill_tp_size": 1.0, "prefill_pp_size": 1.0,
       "prefill_attention_dp_size": 4.0, "prefill_moe_tp_size": 1.0, "prefill_moe_ep_size": 4.0,
       "decode_batch_size": 9.0, "decode_num_workers": 4.0, "decode_tp_size": 8.0, "decode_pp_size": 1.0,
       "decode_attention_dp_size": 1.0, "decode_moe_tp_size": 1.0, "decode_moe_ep_size": 8.0}


def aggregated(row: dict) -> dict:
    """What an aggregated row's builder returns for ``row`` (check-timing's shape, small: 1/8 of
    the output)."""
    gpus = int(row["tp_size"] * row["pp_size"] * row["attention_dp_size"])
    clients = int(row["batch_size"] * row["attention_dp_size"])
    return {"name": row["id"], "seed": 0, "duration_s": 20.0,
            "hardware": {"profile": "gb300_nvl72", "gpus_per_instance": gpus, "instances": 1},
            "model": {"profile": "deepseek_v3"}, "cache": {"block_tokens": 16},
            "serving": {"engine": row["backend"], "max_num_seqs": clients,
                        "parallelism": {"tp": int(row["tp_size"]), "attention_dp": int(row["attention_dp_size"]),
                                        "moe_ep": int(row["moe_ep_size"])}},
            "workload": {"global_system_prompt_tokens": 0, "agent_classes": {"client": {
                "arrival": {"kind": "population", "concurrent": clients, "ramp_s": 0},
                "tools_prefix_tokens": 0, "initial_context_tokens": int(row["isl"]), "calls_per_session": 1,
                "tool_gap_s": 0, "human_turn_probability": 0, "appended_tokens": 0,
                "output_tokens": int(row["osl"]) // 8, "max_context_tokens": int(row["isl"] + row["osl"]) + 16}}},
            "run": {"belady_headroom": False, "check_invariants": True}}


def test_pools_come_from_the_prefill_and_decode_columns():
    data = disaggregated_row_scenario(ROW, aggregated)
    scenario = scenario_from_dict(data)
    pools = scenario.serving.disaggregation
    # An InferenceX prefill worker batches by tokens (16K per rank, its recipes' budget), not
    # one prompt per rank as the row's prefill_batch_size 1 says.
    assert (pools.prefill.workers, pools.prefill.gpus_per_worker, pools.prefill.max_num_seqs) == (1, 4, None)
    assert pools.prefill.max_num_batched_tokens == INFERENCEX_PREFILL_RANK_TOKENS == 16384
    assert (pools.prefill.parallelism.attention_dp, pools.prefill.parallelism.moe_ep) == (4, 4)
    # The row's decode_batch_size (9) is its 36 clients over 4 workers; the recipe that ran this
    # deployment (ctx1_gen4_tep8_batch8_eplb0_mtp0.yaml) caps each decode worker at 8.
    assert (pools.decode.workers, pools.decode.gpus_per_worker, pools.decode.max_num_seqs) == (4, 8, 8)
    assert (pools.decode.parallelism.tp, pools.decode.parallelism.moe_ep) == (8, 8)
    # The aggregated part is the prefill pool's deployment and the benchmark's 36 clients.
    assert scenario.hardware.gpus_per_instance == 4
    assert scenario.workload.agent_classes["client"].arrival.concurrent == 36


def test_the_emulated_row_runs_disaggregated():
    result = run_scenario(scenario_from_dict(disaggregated_row_scenario(ROW, aggregated)))
    done = result.tables["requests"].query("not rejected")
    assert len(done) >= 36 and result.summary["disaggregated"]
    assert set(done.instance) == {0, 1, 2, 3} and set(done.prefill_worker) == {0}
    # Fresh prompts of 6553-8192 tokens (InferenceX's lengths), all handed over (no prefix is shared).
    assert done.prompt_tokens.between(6553, 8192).all() and done.prompt_tokens.nunique() > 1
    assert (done.kv_transfer_bytes == done.prompt_tokens * result.scenario.model.kv_bytes_per_token).all()


def test_the_front_end_routes_decode_in_turn_and_a_full_worker_makes_a_request_wait():
    """Dynamo's frontend (the recipes' front end, no router mode set) picks decode workers
    round-robin, blind to load: with one slot per decode worker (the low-latency recipes' batch 1)
    and as many clients as workers, a client whose request ends first is sent to the next worker
    in turn, which may still be decoding another client's longer request, and waits there (its
    TTFT holds the wait); a least-loaded choice always finds the idle worker."""
    data = disaggregated_row_scenario({**ROW, "decode_num_workers": 4.0}, aggregated)
    assert data["serving"]["router"] == "round_robin"
    assert data["serving"]["disaggregation"]["decode_router"] == "round_robin"
    # Four clients of widely spread output lengths, so requests end out of turn.
    client = {**data["workload"]["agent_classes"]["client"], "initial_context_tokens": 1024,
              "output_tokens": {"dist": "uniform", "low": 50, "high": 1000},
              "arrival": {"kind": "population", "concurrent": 4, "ramp_s": 0}}
    data = {**data, "duration_s": 40.0, "workload": {**data["workload"], "agent_classes": {"client": client}}}
    waits = {}
    for router in ("round_robin", "least_loaded"):
        pools = {**data["serving"]["disaggregation"], "decode_router": router}
        pools["decode"] = {**pools["decode"], "max_num_seqs": 1}
        result = run_scenario(scenario_from_dict({**data, "serving": {**data["serving"], "disaggregation": pools}}))
        done = result.tables["requests"].query("not rejected")
        assert len(done) > 20
        waits[router] = done.decode_queue_s.max()
    assert waits["least_loaded"] == 0.0 and waits["round_robin"] > 1.0


def test_rows_with_pools_take_the_decode_cap_of_the_recipe_that_ran_them():
    """cfg388 (GB200, 1 prefill worker of DEP4, 4 decode workers of TEP8): the database dump
    writes decode_batch_size = clients / 4, but the recipe's decode workers run at most 32
    sequences (``ctx1_gen4_tep8_batch32_eplb0_mtp0.yaml``), so 192 clients get 128 slots and
    the rest wait for one, as the measured 4.8 s TTFT (311 ms at 96 clients) shows."""
    from agentsim.experiments.disagg_recipes import recipe_decode_batch
    from agentsim.experiments.disaggregated_rows import pool, row_deployment

    cfg388 = {**ROW, "id": "dsr1_gb200_trtllm_fp4_disagg_1024x1024_c192_cfg388", "system": "gb200",
              "model_path": "deepseek-ai/DeepSeek-V3", "precision": "fp4", "isl": 1024, "osl": 1024,
              "silicon_data_source": "db-dump/2026-04-27; config_id=388; silicon_concurrency=192; "
                                     "measured=2026-02-05T00:00:00.000Z", "decode_batch_size": 48.0}
    assert pool(cfg388, "decode")["max_num_seqs"] == 48
    assert row_deployment(cfg388, 192)[1]["max_num_seqs"] == 32
    # At 48 clients both a recipe with MTP (batch 8) and one without (batch 32) ran this
    # deployment; the one without is taken, as for the rows built from recipes.
    at48 = {**cfg388, "silicon_data_source": cfg388["silicon_data_source"].replace("=192", "=48"),
            "decode_batch_size": 12.0}
    assert recipe_decode_batch(at48, 48, pool(at48, "prefill"), pool(at48, "decode")) == 32
    # A deployment no recipe ran keeps the row's column.
    other = {**cfg388, "decode_num_workers": 3.0, "decode_batch_size": 64.0}
    assert recipe_decode_batch(other, 192, pool(other, "prefill"), pool(other, "decode")) is None
    assert row_deployment(other, 192)[1]["max_num_seqs"] == 64


def test_concurrency_falls_back_to_decode_slots():
    assert concurrency(ROW) == 36
    assert concurrency({**ROW, "silicon_data_source": "db-dump"}) == 36
    # The batch size is per attention-DP rank: 64 x 32 ranks x 1 worker (dsr1_gb200 ... c2048).
    assert concurrency({**ROW, "silicon_data_source": "", "decode_batch_size": 64.0, "decode_num_workers": 1.0,
                        "decode_attention_dp_size": 32.0}) == 2048
    with pytest.raises(DisaggRowError, match="prefill_num_workers"):
        disaggregated_row_scenario({**ROW, "prefill_num_workers": float("nan")}, aggregated)


def test_a_prefill_rank_batches_prompts_up_to_its_token_budget():
    """36 clients of 1K-token prompts arrive at once at one DP-4 prefill worker: batched by the
    16K-token budget, a rank prefills its nine prompts in one step and pays the step's host
    time once, so the burst clears sooner than at one prompt per rank per step (the row's
    prefill_batch_size, which the eval harness's rows keep). (At 8K tokens two prompts fill a
    step and the host time is a small part of it: batching then raises the mean TTFT of a
    burst, as it delays the first prompt of each pair.)"""
    data = disaggregated_row_scenario({**ROW, "isl": 1024}, aggregated)
    one_per_rank = {**data, "serving": {**data["serving"], "disaggregation": {
        **data["serving"]["disaggregation"],
        "prefill": {**data["serving"]["disaggregation"]["prefill"], "max_num_seqs": 4, "max_num_batched_tokens": 8192}}}}
    waits = []
    for scenario in (data, one_per_rank):
        requests = run_scenario(scenario_from_dict(scenario)).tables["requests"]
        first_burst = requests.sort_values("arrival_s").head(36)
        waits.append(first_burst.ttft_s.mean())
    assert waits[0] < 0.9 * waits[1]
    eval_harness = {**ROW, "silicon_data_source": "aic-auto-gap-analysis; silicon_concurrency=36"}
    prefill = scenario_from_dict(disaggregated_row_scenario(eval_harness, aggregated)).serving.disaggregation.prefill
    assert prefill.max_num_seqs == 4 and prefill.max_num_batched_tokens is None


def test_prefill_attention_dp_ranks_are_counted_once():
    """The aggregated builder is given the prefill pool's batch per attention-DP rank (as the
    row's ``prefill_batch_size``), so it sizes the prefill worker's own batch: 2 per rank x 4
    ranks = 8 sequences, not 2 x 4 x 4."""
    seen = {}

    def recording(row: dict) -> dict:
        seen.update(row)
        return aggregated(row)

    disaggregated_row_scenario({**ROW, "prefill_batch_size": 2.0}, recording)
    assert seen["batch_size"] * seen["attention_dp_size"] == 8



# Rows without worker counts, as measured_runs.csv spells them (InferenceX exports).
RECIPE_ROW = {"id": "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_disagg_1024x1024_c90_tp4_0_ep4_0_1150",
              "silicon_data_source": "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=90; "
                                     "measured=2026-01-29T15:52:16Z; wip=False",
              "backend": "trtllm", "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "precision": "fp4",
              "mode": "disagg", "isl": 1024, "osl": 1024, "batch_size": float("nan"), "tp_size": float("nan"),
              "prefill_batch_size": float("nan"), "prefill_num_workers": float("nan"), "prefill_tp_size": 4.0,
              "prefill_pp_size": 1.0, "prefill_attention_dp_size": 1.0, "prefill_moe_tp_size": 1.0,
              "prefill_moe_ep_size": 4.0, "decode_batch_size": float("nan"), "decode_num_workers": float("nan"),
              "decode_tp_size": 8.0, "decode_pp_size": 1.0, "decode_attention_dp_size": 1.0,
              "decode_moe_tp_size": 2.0, "decode_moe_ep_size": 4.0}


def test_rows_without_worker_counts_take_the_recipe_they_ran():
    """InferenceX's recipe for this run: 1 prefill worker of DEP4 (attention DP 4, experts over
    4), 5 decode workers of TEP8 with TensorRT-LLM's max_batch_size 32; the export's decode
    ``moe_ep_size`` 4 (the prefill pool's) is not used."""
    from agentsim.experiments.disagg_recipes import recipe_pools

    prefill, decode, info = recipe_pools(RECIPE_ROW, 90)
    assert prefill == {"workers": 1, "gpus_per_worker": 4,
                       "parallelism": {"tp": 1, "pp": 1, "attention_dp": 4, "moe_tp": 1, "moe_ep": 4}}
    assert decode == {"workers": 5, "gpus_per_worker": 8, "max_num_seqs": 32,
                      "parallelism": {"tp": 8, "pp": 1, "attention_dp": 1, "moe_tp": 1, "moe_ep": 8}}
    assert info["recipe"].endswith("ctx1_gen5_tep8_batch32_eplb0_mtp0.yaml") and info["ambiguous"]
    scenario = scenario_from_dict(disaggregated_row_scenario(RECIPE_ROW, aggregated))
    pools = scenario.serving.disaggregation
    assert (pools.prefill.workers, pools.decode.workers, pools.decode.max_num_seqs) == (1, 5, 32)
    assert scenario.workload.agent_classes["client"].arrival.concurrent == 90


def test_a_dp_recipe_with_fewer_expert_ranks_than_gpus_splits_the_rest_by_tensor():
    """B300 FP8 at 128 clients ran a DP prefill worker of ``tp 4, ep 1``: attention over 4 DP
    ranks, the experts TP-4 (TensorRT-LLM's moe_tp = tp / ep). The pool must say so, and the
    scenario must load: moe_tp 1 x moe_ep 1 on 4 GPUs is no split of the experts."""
    from agentsim.experiments.disagg_recipes import recipe_pools

    row = {**RECIPE_ROW, "id": "2026_04_06_deepseek_r1_b300_sxm_trtllm_fp8_disagg_1024x1024_c128_tp4_ep1_1694",
           "system": "b300_sxm", "precision": "fp8", "prefill_moe_ep_size": 1.0, "decode_moe_ep_size": 1.0,
           "silicon_data_source": "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=128; "
                                  "measured=2026-02-12T00:00:00.000Z; wip=False"}
    prefill, decode, _ = recipe_pools(row, 128)
    assert prefill["parallelism"] == {"tp": 1, "pp": 1, "attention_dp": 4, "moe_tp": 4, "moe_ep": 1}
    assert decode["parallelism"]["moe_tp"] * decode["parallelism"]["moe_ep"] == decode["gpus_per_worker"]
    pools = scenario_from_dict(disaggregated_row_scenario(row, aggregated)).serving.disaggregation
    assert (pools.prefill.parallelism.moe_tp, pools.prefill.parallelism.moe_ep) == (4, 1)


def test_a_recipe_without_a_batch_spreads_the_clients_over_the_decode_workers():
    """SGLang's recipe (low latency on GB300: 1 prefill and 4 decode workers of TP4) names no
    batch: 16 clients over 4 decode workers hold 4 slots each."""
    from agentsim.experiments.disagg_recipes import recipe_pools

    row = {**RECIPE_ROW, "backend": "sglang", "system": "gb300", "precision": "fp8", "prefill_moe_ep_size": 1.0,
           "decode_tp_size": 4.0, "silicon_data_source": "source_file=2026-03-25.csv; model=DeepSeek-R1; "
                                                          "silicon_concurrency=16; measured=2026-02-09T15:50:05Z"}
    prefill, decode, info = recipe_pools(row, 16)
    assert (prefill["workers"], prefill["parallelism"]["tp"]) == (1, 4)
    assert (decode["workers"], decode["parallelism"]["tp"], decode["max_num_seqs"]) == (4, 4, 4)
    assert info["decode_batch_from"] == "clients / decode workers" and not info["ambiguous"]


def test_a_row_only_mtp_recipes_fit_is_built_with_their_mtp_depth():
    """At 24 clients of 8192/1024 tokens on GB300 this deployment ran with MTP only: its recipe
    file ``ctx1_gen4_tep8_batch4_eplb0_mtp3.yaml`` gives 3 draft tokens per decode step."""
    from agentsim.experiments.disagg_recipes import DEFAULT_DRAFT_TOKENS, draft_tokens
    from agentsim.experiments.disaggregated_rows import pools_description

    mtp = {**RECIPE_ROW, "system": "gb300", "isl": 8192, "prefill_tp_size": 2.0, "prefill_moe_ep_size": 2.0,
           "silicon_data_source": "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=24; "
                                  "measured=2026-02-03T00:00:00.000Z"}
    serving = disaggregated_row_scenario(mtp, aggregated)["serving"]
    assert serving["speculative_decoding"] == {"draft_tokens": 3}
    assert (serving["disaggregation"]["decode"]["workers"], serving["disaggregation"]["decode"]["max_num_seqs"]) == (4, 4)
    assert pools_description(mtp) == "recipe, MTP"
    # A recipe without MTP builds none; a file that names no depth gets aiconfigurator's default.
    assert "speculative_decoding" not in disaggregated_row_scenario(RECIPE_ROW, aggregated)["serving"]
    assert draft_tokens("recipes/trtllm/gb300-fp4/8k1k/mtp/ctx1_gen1_dep32_batch8_eplb0_mtp.yaml") == DEFAULT_DRAFT_TOKENS == 1
    assert draft_tokens("ctx1_gen8_tp8_batch1_eplb0_mtp3_10.yaml") == 3


def test_the_image_a_row_names_picks_between_mtp_and_plain_runs_of_a_deployment():
    """DeepSeek-R1 FP4 on B200 with SGLang, 16 clients of 8k/1k, prefill TP 4 and decode TP 8:
    in February 2026 InferenceX ran that deployment with MTP on ``v0.5.8.post1-cu130`` and
    without on another image; a row that names the MTP image ran MTP, a row naming none is
    ambiguous between them."""
    from agentsim.experiments.disagg_recipes import recipe_pools

    row = {"id": "r", "backend": "sglang", "system": "b200_sxm", "precision": "fp4", "mode": "disagg",
           "model_path": "deepseek-ai/DeepSeek-R1", "isl": 8192, "osl": 1024,
           "prefill_tp_size": 4.0, "prefill_moe_ep_size": 1.0, "decode_tp_size": 8.0,
           "silicon_data_source": "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=16; "
                                  "measured=2026-02-11T22:38:20Z; wip=False; image=lmsysorg/sglang:v0.5.8.post1-cu130"}
    _, _, named = recipe_pools(row, 16)
    assert named["draft_tokens"] is not None and not named["ambiguous"]
    unnamed = {**row, "silicon_data_source": row["silicon_data_source"].rsplit("; image=", 1)[0]}
    _, _, either = recipe_pools(unnamed, 16)
    assert either["draft_tokens"] is None and either["ambiguous"]


def test_rows_no_recipe_emulates_are_skipped_with_the_reason():
    # Both pools "tp 52" with no expert split: a deployment's size, not a worker's.
    whole = {**RECIPE_ROW, "system": "gb200", "isl": 8192, "prefill_tp_size": 52.0, "prefill_moe_ep_size": 1.0,
             "decode_tp_size": 52.0, "silicon_data_source": "source_file=2026-04-06.csv; model=DeepSeek-R1; "
                                                            "silicon_concurrency=128; measured=2025-12-05"}
    with pytest.raises(DisaggRowError, match="give the deployment's GPUs"):
        disaggregated_row_scenario(whole, aggregated)
    with pytest.raises(DisaggRowError, match="no InferenceX recipe .* 91 clients"):
        disaggregated_row_scenario({**RECIPE_ROW, "silicon_data_source": RECIPE_ROW["silicon_data_source"].replace(
            "=90", "=91")}, aggregated)


def test_inferencex_rows_are_measured_as_its_benchmark_runs():
    """sa-bench: lengths uniform over [0.8 x len, len], all 10 x clients prompts measured from
    the first burst, for the recipe rows and the database dump's rows (InferenceX's own runs);
    the rows of aiconfigurator's eval harness keep their exact lengths."""
    from agentsim.experiments.disaggregated_rows import measured_by_inferencex

    assert measured_by_inferencex(RECIPE_ROW) and measured_by_inferencex(ROW)
    client = disaggregated_row_scenario(RECIPE_ROW, aggregated)["workload"]["agent_classes"]["client"]
    assert client["initial_context_tokens"] == {"dist": "uniform", "low": 819, "high": 1024}
    assert client["output_tokens"] == {"dist": "uniform", "low": 819, "high": 1024}
    given = disaggregated_row_scenario(ROW, aggregated)["workload"]["agent_classes"]["client"]
    assert given["initial_context_tokens"] == {"dist": "uniform", "low": 6553, "high": 8192}
    aic = {**ROW, "silicon_data_source": "source_file=/data/aic-auto-gap-analysis/data/h100_sxm/x.csv; "
                                         "silicon_concurrency=36; measured=2026-01-23"}
    assert not measured_by_inferencex(aic)
    exact = disaggregated_row_scenario(aic, aggregated)["workload"]["agent_classes"]["client"]
    assert exact["initial_context_tokens"] == 8192


def test_an_inferencex_row_measures_its_ten_rounds_with_their_lengths():
    from agentsim.experiments.timing_check import emulate_row

    # The b200 recipe at 6 clients: 1 prefill worker of DEP4, 5 decode workers of TEP8.
    row = {**RECIPE_ROW, "silicon_data_source": RECIPE_ROW["silicon_data_source"].replace("=90", "=6"),
           "silicon_ttft_ms": 200.0, "silicon_tpot_ms": 10.0}
    result = emulate_row(row)
    assert result.skipped is None and result.pools in ("recipe", "recipe, ambiguous")
    assert result.measured_requests == 60          # 10 x 6 prompts, the first burst included
    assert result.predicted_ttft_ms > 0 and result.predicted_tpot_ms > 0
    dump = emulate_row({**ROW, "silicon_ttft_ms": 500.0, "silicon_tpot_ms": 8.0})
    assert dump.pools == "row" and dump.measured_requests == 10 * 36


def test_entries_without_a_parallelism_are_not_deployments():
    """InferenceX's December SGLang entries on GB200 write tp 1, ep 1 with attention DP for
    both pools; a row matching only those is skipped, not emulated on 1-GPU workers."""
    row = {**RECIPE_ROW, "backend": "sglang", "system": "gb200", "prefill_tp_size": 1.0, "prefill_moe_ep_size": 1.0,
           "decode_tp_size": 1.0, "silicon_data_source": "source_file=2026-04-06.csv; model=DeepSeek-R1; "
                                                          "silicon_concurrency=4; measured=2025-12-21T00:00:00.000Z",
           "precision": "fp8"}
    with pytest.raises(DisaggRowError, match="give no parallelism"):
        disaggregated_row_scenario(row, aggregated)
