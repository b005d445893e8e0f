"""Extract the single-node (aggregated) benchmark entries of InferenceX's configurations.

The aggregated InferenceX rows of ``measured_runs.csv`` say which model, system, engine,
precision, lengths, parallelism and concurrency ran, and most name the container image, but not
whether the server ran speculative decoding. InferenceX's ``nvidia-master.yaml`` does: each
single-node ``search-space`` entry has a ``tp``, an ``ep``, a concurrency range and an optional
``spec-decoding: mtp``, which selects the benchmark script ``<model>_<precision>_<gpu>[_trt]_mtp.sh``
instead of the one without. This script reads every version of that file (and, for the MTP
entries, the script each version ran) in a clone of https://github.com/SemiAnalysisAI/InferenceX
and writes one CSV row per distinct entry, from the first version that has it, to
``agentsim/data/inferencex_agg_recipes.csv``. The MTP depth is the script's: SGLang's
``SPECULATIVE_NUM_STEPS``, TensorRT-LLM's ``MTP`` (its scripts set 3, and 1 with attention DP).

    python scripts/inferencex_agg_recipes.py PATH/TO/InferenceX [--until 2026-04-27]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

from inferencex_history import git, write_entries

OUT = Path(__file__).resolve().parents[1] / "agentsim" / "data" / "inferencex_agg_recipes.csv"
COLUMNS = ["commit", "date", "config", "image", "model_prefix", "precision", "runner", "framework", "isl", "osl",
           "tp", "ep", "dp_attn", "conc_start", "conc_end", "conc_list", "spec_decoding", "draft_tokens"]
_SGLANG_STEPS = re.compile(r"(?:SPECULATIVE_NUM_STEPS=|--speculative-num-steps[ =])(\d+)")
_TRT_MTP = re.compile(r"^\s*MTP=(\d+)")
_DP_BRANCH = re.compile(r"if\s+\[\[\s*\"?\$\{?DP_ATTENTION\}?\"?\s*==\s*\"?true\"?\s*\]\]")



def _script(repo: str, commit: str, entry: dict) -> str | None:
    """Text of the MTP benchmark script ``entry`` ran at ``commit`` (None if not found)."""
    gpu = str(entry.get("runner") or "").split("-")[0]
    suffix = "_trt" if entry.get("framework") == "trt" else ""
    name = f"{entry.get('model-prefix')}_{entry.get('precision')}_{gpu}{suffix}_mtp.sh"
    # Scripts moved to benchmarks/single_node in 2026; before, some carried a ``_slurm`` suffix.
    for path in (f"benchmarks/single_node/{name}", f"benchmarks/{name}", f"benchmarks/{name[:-3]}_slurm.sh"):
        try:
            return git(repo, "show", f"{commit}:{path}")
        except subprocess.CalledProcessError:
            continue
    return None


def draft_depth(script: str, framework: str, dp_attn: bool) -> int | None:
    """MTP draft tokens a benchmark script sets: SGLang's ``SPECULATIVE_NUM_STEPS``, or the
    ``MTP=N`` of TensorRT-LLM's scripts, taken from the ``DP_ATTENTION == true`` branch when the
    entry runs attention DP and from outside it otherwise (None when the script sets none)."""
    if framework != "trt":
        found = _SGLANG_STEPS.search(script)
        return int(found.group(1)) if found else None
    inside, depth_dp, depth_plain = False, None, None
    for line in script.splitlines():
        stripped = line.strip()
        if _DP_BRANCH.search(stripped):
            inside = True
            continue
        if inside and stripped in ("fi", "else"):
            inside = False
            continue
        found = _TRT_MTP.match(line)
        if found:
            if inside:
                depth_dp = int(found.group(1))
            else:
                depth_plain = int(found.group(1))
    return (depth_dp if depth_dp is not None else depth_plain) if dp_attn else depth_plain


def _rows(repo: str, commit: str, date: str, text: str):
    for name, entry in (yaml.safe_load(text) or {}).items():
        if not isinstance(entry, dict) or entry.get("disagg") or entry.get("multinode"):
            continue
        for seq in entry.get("seq-len-configs") or []:
            for space in seq.get("search-space") or []:
                if not isinstance(space, dict) or "tp" not in space:
                    continue
                concs = space.get("conc-list")
                low, high = (min(concs), max(concs)) if concs else (space.get("conc-start"), space.get("conc-end"))
                spec = space.get("spec-decoding", "none")
                dp_attn = bool(space.get("dp-attn"))
                depth = None
                if spec == "mtp":
                    script = _script(repo, commit, entry)
                    depth = draft_depth(script, entry.get("framework"), dp_attn) if script else None
                # enroot's "nvcr.io#nvidia/..." names the same image as "nvcr.io/nvidia/...".
                yield {"commit": commit, "date": date, "config": name, "image": str(entry.get("image") or "").replace("#", "/"),
                       "model_prefix": entry.get("model-prefix"), "precision": entry.get("precision"),
                       "runner": entry.get("runner"), "framework": entry.get("framework"), "isl": seq.get("isl"),
                       "osl": seq.get("osl"), "tp": space.get("tp"), "ep": space.get("ep", 1), "dp_attn": dp_attn,
                       "conc_start": low, "conc_end": high, "conc_list": " ".join(map(str, concs)) if concs else "",
                       "spec_decoding": spec, "draft_tokens": depth if depth is not None else ""}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo")
    parser.add_argument("--until", default="2026-04-27", help="last commit date (the measured-runs dump)")
    args = parser.parse_args(argv)
    write_entries(args.repo, args.until, lambda commit, date, text: _rows(args.repo, commit, date, text), COLUMNS, OUT,
                  "InferenceX nvidia-master.yaml single-node search space (github.com/SemiAnalysisAI/InferenceX,\n"
                  f"Apache-2.0), every version up to {args.until}; written by scripts/{Path(__file__).name}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
