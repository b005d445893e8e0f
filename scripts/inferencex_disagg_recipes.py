"""Extract the disaggregated deployments of InferenceX's benchmark configurations.

The ``source_file=`` rows of ``measured_runs.csv`` are InferenceX (SemiAnalysis, Apache-2.0)
runs of Dynamo disaggregated deployments; their export keeps each pool's TP and expert split
but drops the worker counts and attention-DP flags. InferenceX's ``nvidia-master.yaml`` (one
``search-space`` entry per deployment: prefill and decode ``num-worker``, ``tp``, ``ep``,
``dp-attn``, ``spec-decoding``, the ``conc-list`` it was run at) defines them. This script reads
every version of that file in a clone of https://github.com/SemiAnalysisAI/InferenceX and writes
one CSV row per (deployment, container image, concurrency), from the first version that has it, to
``agentsim/data/inferencex_disagg_recipes.csv``.

    python scripts/inferencex_disagg_recipes.py PATH/TO/InferenceX [--until 2026-04-27]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from inferencex_history import write_entries

OUT = Path(__file__).resolve().parents[1] / "agentsim" / "data" / "inferencex_disagg_recipes.csv"
COLUMNS = ["commit", "date", "config", "image", "model_prefix", "precision", "runner", "framework", "isl", "osl",
           "concurrency", "spec_decoding", "prefill_workers", "prefill_tp", "prefill_ep", "prefill_dp_attn",
           "decode_workers", "decode_tp", "decode_ep", "decode_dp_attn", "decode_batch", "recipe"]
_BATCH = re.compile(r"batch(\d+)")



def _rows(commit: str, date: str, text: str):
    for name, entry in (yaml.safe_load(text) or {}).items():
        if not isinstance(entry, dict) or not entry.get("disagg"):
            continue
        for seq in entry.get("seq-len-configs") or []:
            for space in seq.get("search-space") or []:
                prefill, decode = space.get("prefill"), space.get("decode")
                if not isinstance(prefill, dict) or not isinstance(decode, dict):
                    continue
                settings = " ".join(str(s) for s in (prefill.get("additional-settings") or [])
                                    + (decode.get("additional-settings") or []))
                recipe = re.search(r"CONFIG_FILE=(\S+)", settings)
                batch = _BATCH.search(recipe.group(1).rsplit("/", 1)[-1]) if recipe else None
                for conc in space.get("conc-list") or []:
                    # enroot's "nvcr.io#nvidia/..." names the same image as "nvcr.io/nvidia/...".
                    yield {"commit": commit, "date": date, "config": name,
                           "image": str(entry.get("image") or "").replace("#", "/"), "model_prefix": entry.get("model-prefix"),
                           "precision": entry.get("precision"), "runner": entry.get("runner"),
                           "framework": entry.get("framework"), "isl": seq.get("isl"), "osl": seq.get("osl"),
                           "concurrency": conc, "spec_decoding": space.get("spec-decoding", "none"),
                           "prefill_workers": prefill.get("num-worker"), "prefill_tp": prefill.get("tp"),
                           "prefill_ep": prefill.get("ep"), "prefill_dp_attn": bool(prefill.get("dp-attn")),
                           "decode_workers": decode.get("num-worker"), "decode_tp": decode.get("tp"),
                           "decode_ep": decode.get("ep"), "decode_dp_attn": bool(decode.get("dp-attn")),
                           "decode_batch": batch.group(1) if batch else "",
                           "recipe": recipe.group(1) if recipe else ""}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo")
    parser.add_argument("--until", default="2026-04-27", help="last commit date (the measured-runs dump)")
    args = parser.parse_args(argv)
    write_entries(args.repo, args.until, _rows, COLUMNS, OUT,
                  "InferenceX nvidia-master.yaml disaggregated search space (github.com/SemiAnalysisAI/InferenceX,\n"
                  f"Apache-2.0), every version up to {args.until}; written by scripts/{Path(__file__).name}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
