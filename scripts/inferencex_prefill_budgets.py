"""Survey the prefill workers' token budgets in InferenceX's disaggregated recipes.

InferenceX (SemiAnalysis, Apache-2.0) keeps the srt-slurm recipes its disaggregated runs launch
under ``benchmarks/multi_node/srt-slurm-recipes``. This script reads the last version of every
such ``.yaml`` with ``disagg`` in its path in a clone of https://github.com/SemiAnalysisAI/InferenceX
and counts, per engine and prompt length (``8k`` in the path or not), the token budget of one
attention-DP rank's prefill iteration:

* TensorRT-LLM: the prefill section's ``max_num_tokens`` (per rank already);
* SGLang: ``chunked-prefill-size`` divided by ``dp-size`` under ``enable-dp-attention``, capped by
  ``max-prefill-tokens`` (SGLang's default 16,384 when unset);
* vLLM: ``max-num-batched-tokens``.

docs/validation.md quotes its output for ``disaggregated_rows.INFERENCEX_PREFILL_RANK_TOKENS``.

    python scripts/inferencex_prefill_budgets.py PATH/TO/InferenceX
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys

import yaml

RECIPES = "srt-slurm-recipes"
#: SGLang's ``--max-prefill-tokens`` default.
SGLANG_MAX_PREFILL_TOKENS = 16384
_SECTIONS = (("trtllm_config", "trtllm"), ("sglang_config", "sglang"), ("vllm_config", "vllm"))


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True).stdout


def prefill_rank_tokens(engine: str, prefill: dict) -> int | None:
    """One prefill rank's token budget from a recipe's prefill section (None: not set)."""
    if engine == "trtllm":
        return prefill.get("max_num_tokens")
    if engine == "vllm":
        return prefill.get("max-num-batched-tokens") or prefill.get("max_num_batched_tokens")
    tokens = prefill.get("chunked-prefill-size") or prefill.get("chunked_prefill_size")
    dp = prefill.get("dp-size") or prefill.get("dp_size") or 1
    if tokens and dp > 1 and (prefill.get("enable-dp-attention") or prefill.get("enable_dp_attention")):
        tokens //= dp
    cap = prefill.get("max-prefill-tokens") or prefill.get("max_prefill_tokens") or SGLANG_MAX_PREFILL_TOKENS
    return min(tokens, cap) if tokens else cap


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repo", help="a clone of InferenceX")
    args = parser.parse_args(argv)
    paths = sorted({p for p in _git(args.repo, "log", "--all", "--name-only", "--format=").splitlines()
                    if RECIPES in p and p.endswith(".yaml") and "disagg" in p})
    counts: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    for path in paths:
        commit = _git(args.repo, "log", "--all", "--format=%h", "-1", "--", path).strip()
        try:
            recipe = yaml.safe_load(_git(args.repo, "show", f"{commit}:{path}"))
        except yaml.YAMLError:
            continue
        backend = recipe.get("backend") if isinstance(recipe, dict) else None
        if not isinstance(backend, dict):
            continue
        for section, engine in _SECTIONS:
            config = backend.get(section)
            prefill = config.get("prefill") if isinstance(config, dict) else None
            if isinstance(prefill, dict):
                counts[(engine, "8k" if "8k" in path else "1k")][prefill_rank_tokens(engine, prefill)] += 1
    for (engine, length), found in sorted(counts.items()):
        common = ", ".join(f"{tokens} ({n})" for tokens, n in found.most_common(6))
        print(f"{engine:7s} {length}: {sum(found.values()):4d} files; {common}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
