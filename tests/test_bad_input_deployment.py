"""The bad-input catalogue, continued: deployments named or sized beyond what exists.

Names that select measured timing (``hardware.system``, ``serving.engine_version``,
``serving.precision.*``, ``model.name``) are checked against what aiconfigurator-core lists, and
the engine's sizes (GPUs per instance and per worker, the MoE split, batch slots, the iteration's
token budget, the block size) against the hardware and the ``limits:`` section, before anything
is allocated. Each case used to run: a misspelt name silently on the roofline (a precision typo
also sized the weights at the model's published format), a size as given. Same harness as
:mod:`tests.test_bad_input_catalogue`, in a 2 GiB address space with a wall-time bound; the ids
are listed in docs/errors.md. The last tests check that a name the package knows but has no data
for still falls back to the roofline with its reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.test_bad_input_catalogue import BASE, Case, _mutated, _run, check_refused
from tests.test_bad_input_limits import MAX_MEMORY_BYTES, MAX_WALL_S

CASES: list[Case] = []

HARDWARE = "  profile: gb300_nvl72\n"
SERVING = "  max_batch_requests: 16\n"
MODEL = "  profile: deepseek_v3\n"


def _case(id: str, old: str, new: str, needle: str, fragments: list[str]):
    """BASE with ``old`` replaced by ``new``; the message names the file, the line holding
    ``needle`` and ``fragments``."""
    def build(tmp: Path):
        path, _ = _mutated(tmp, old, new)
        line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if needle in text)
        return _run(tmp, path), [str(path), f"line {line}", *fragments]
    CASES.append(Case(id, build))


# --- names that select a database, a kernel dtype or a model config ---------------------------------
_case("scenario-unknown-system", HARDWARE, HARDWARE + "  system: gb301\n", "system:",
      ["hardware.system", "unknown GPU system 'gb301'", "did you mean 'gb300'", "h100_sxm"])
_case("scenario-unknown-weights-precision", SERVING, SERVING + "  precision: {weights: FP8}\n", "precision:",
      ["serving.precision.weights", "unknown weights precision 'FP8'", "did you mean 'fp8'", "fp8_block"])
_case("scenario-unknown-kv-precision", SERVING, SERVING + "  precision: {kv_cache: fp4}\n", "precision:",
      ["serving.precision.kv_cache", "unknown kv_cache precision 'fp4'", "bfloat16, int8, fp8"])
_case("scenario-unknown-attention-precision", SERVING, SERVING + "  precision: {attention: fp16}\n", "precision:",
      ["serving.precision.attention", "'fp16'", "float16"])
_case("scenario-unknown-engine-version", SERVING, SERVING + "  engine: vllm\n  engine_version: '0.99.0'\n",
      "engine_version", ["serving.engine_version", "unknown vllm version '0.99.0'", "on gb300", "0.27.0"])
_case("scenario-engine-version-a-number", SERVING, SERVING + "  engine_version: 0.10\n", "engine_version",
      ["serving.engine_version", "must be text", "quotes"])
_case("scenario-model-name-not-an-id", MODEL, MODEL + "  name: deepseek_v3\n", "name: deepseek_v3",
      ["model.name", "unknown model 'deepseek_v3'", "Hugging Face id"])
_case("scenario-model-name-wrong-case", MODEL, MODEL + "  name: deepseek-ai/deepseek-v3\n", "name: deepseek-ai",
      ["model.name", "did you mean 'deepseek-ai/DeepSeek-V3'", "case-sensitive"])

# --- sizes against the hardware and the limits -------------------------------------------------------
_case("scenario-gpus-per-instance-huge", "gpus_per_instance: 4", "gpus_per_instance: 100000000", "gpus_per_instance",
      ["hardware.gpus_per_instance", "100,000,000 GPUs per instance", "limits.max_gpus_per_instance"])
_case("scenario-instance-spans-part-of-a-domain", "gpus_per_instance: 4", "gpus_per_instance: 80", "gpus_per_instance",
      ["hardware.gpus_per_instance", "spans 1.11 NVLink domains of 72 GPUs", "whole domains"])
_case("scenario-moe-split-mismatch", SERVING, SERVING + "  parallelism: {moe_tp: 3, moe_ep: 5}\n", "parallelism",
      ["serving.parallelism.moe_ep", "moe_tp 3 x moe_ep 5 must equal tp 4 x attention_dp 1"])
_case("scenario-moe-ep-huge", SERVING, SERVING + "  parallelism: {moe_ep: 100000000}\n", "parallelism",
      ["serving.parallelism.moe_ep", "must divide tp 4 x attention_dp 1"])
_case("scenario-max-num-seqs-huge", SERVING, SERVING + "  max_num_seqs: 100000000\n", "max_num_seqs",
      ["serving.max_num_seqs", "100,000,000 requests per batch", "limits.max_batch_requests"])
_case("scenario-batch-tokens-huge", SERVING, SERVING + "  max_num_batched_tokens: 100000000000\n",
      "max_num_batched_tokens", ["serving.max_num_batched_tokens", "tokens per iteration", "limits.max_batch_tokens"])
_case("scenario-block-longer-than-context", "block_tokens: 64", "block_tokens: 300000", "block_tokens",
      ["cache.block_tokens", "longer than any context", "nothing could ever be cached"])
_case("scenario-worker-gpus-huge", SERVING,
      SERVING + "  disaggregation: {prefill: {gpus_per_worker: 100000000}}\n", "disaggregation",
      ["serving.disaggregation.prefill.gpus_per_worker", "GPUs per worker", "limits.max_gpus_per_instance"])
_case("scenario-worker-moe-split-mismatch", SERVING,
      SERVING + "  disaggregation: {decode: {parallelism: {moe_ep: 3}}}\n", "disaggregation",
      ["serving.disaggregation.decode.parallelism.moe_ep", "must divide"])


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    tmp, wall_s = check_refused(case, tmp_path, max_memory_bytes=MAX_MEMORY_BYTES)
    assert wall_s < MAX_WALL_S, f"took {wall_s:.1f} s"


def _scenario(**edits):
    from agentsim.engine.loading import scenario_from_dict

    data = yaml.safe_load(BASE)
    for path, value in edits.items():
        section, key = path.split("__")
        data[section][key] = value
    return scenario_from_dict(data, source="test.yaml")


def test_known_system_without_a_database_falls_back_to_the_roofline():
    """a30 is a system aiconfigurator-core describes but ships no database for: accepted, and
    timed with the roofline, saying why."""
    from agentsim.hardware.timing.database_names import measured_versions
    from agentsim.hardware.timing.select import build_timer

    assert "a30" not in measured_versions()
    scenario = _scenario(hardware__system="a30", serving__engine="vllm")
    _, choice = build_timer(scenario)
    assert choice.source == "roofline" and choice.reason.startswith("measured timing unavailable")


def test_version_of_another_system_is_accepted():
    """A version some system was measured with is a valid name even where this system lacks it
    (a100_sxm has vLLM 0.14.0 only): the timing selection decides, not the name check."""
    from agentsim.hardware.timing.database_names import measured_versions

    versions = measured_versions()
    assert "0.27.0" in versions["h200_sxm"]["vllm"] and "0.27.0" not in versions["a100_sxm"]["vllm"]
    scenario = _scenario(hardware__system="a100_sxm", serving__engine="vllm", serving__engine_version="0.27.0")
    assert scenario.serving.engine_version == "0.27.0"


def test_names_listed_by_the_package_are_accepted():
    """Every precision the package defines, every system it describes and any Hugging Face id
    pass the name check (the lists are the package's, not a copy)."""
    from agentsim.config.scenario import Scenario
    from agentsim.engine.timing_name_checks import check_timing_names
    from agentsim.hardware.timing import database_names

    base = _scenario()
    for key in database_names.PRECISION_ENUMS:
        for name in database_names.precision_names(key):
            serving = base.serving.model_copy(update={"precision": base.serving.precision.model_copy(update={key: name})})
            check_timing_names(base.model_copy(update={"serving": serving}), "test.yaml", {})
    for system in database_names.system_names():
        check_timing_names(base.model_copy(update={"hardware": base.hardware.model_copy(update={"system": system})}),
                           "test.yaml", {})
    assert isinstance(base, Scenario)
    model = base.model.model_copy(update={"name": "example-org/Not-Bundled-7B"})
    check_timing_names(base.model_copy(update={"model": model}), "test.yaml", {})
