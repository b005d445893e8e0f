"""A serving deployment as the measured-timing databases know it.

A :class:`Deployment` names everything a step time depends on: the model (its Hugging Face id,
as aiconfigurator-core's bundled model configs name it), the GPU system, the serving engine and
its version, the parallelism and the precisions, and the ranges the step tables must cover.
It is hashable and serialisable, so a built table can be cached on disk under its key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

#: Hugging Face ids that aiconfigurator-core bundles under another name (same weights/config).
MODEL_ALIASES = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
    "zhipuai/GLM-5": "zai-org/GLM-5",
}


def canonical_model(hf_id: str) -> str:
    """The model id aiconfigurator-core knows ``hf_id`` by."""
    return MODEL_ALIASES.get(hf_id, hf_id)


@dataclass(frozen=True)
class Deployment:
    """One serving instance's deployment, in aiconfigurator-core's terms.

    ``tp * pp * attention_dp`` GPUs serve the instance; for MoE models
    ``moe_tp * moe_ep == tp * attention_dp``. Quant modes are aiconfigurator names (``fp8``,
    ``fp8_block``, ``nvfp4``, ``float16``, ``int4_wo``...; None = the model's default).
    ``max_num_tokens`` / ``max_num_seqs`` / ``max_context_tokens`` bound the step tables
    (queries beyond them are extrapolated).
    """

    model: str
    system: str
    backend: str
    backend_version: str | None = None
    tp: int = 1
    pp: int = 1
    attention_dp: int = 1
    moe_tp: int | None = None
    moe_ep: int | None = None
    gemm_quant: str | None = None
    moe_quant: str | None = None
    kv_quant: str | None = None
    fmha_quant: str | None = None
    max_num_tokens: int = 8192
    max_num_seqs: int = 256
    max_context_tokens: int = 131072

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.attention_dp

    def key(self, package_version: str) -> str:
        """Cache key: this deployment plus the database package version."""
        blob = json.dumps({"deployment": asdict(self), "package": package_version, "format": 2}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def describe(self) -> str:
        par = f"tp{self.tp}" + (f" pp{self.pp}" if self.pp > 1 else "") + (f" dp{self.attention_dp}" if self.attention_dp > 1 else "")
        if self.moe_ep or self.moe_tp:
            par += f" moe_tp{self.moe_tp or 1} moe_ep{self.moe_ep or 1}"
        version = f" {self.backend_version}" if self.backend_version else ""
        return f"{self.model} on {self.system} with {self.backend}{version}, {par}"
