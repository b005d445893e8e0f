"""The nearest precision the measured databases have, when a deployment's own is missing.

The databases are measured per operation and per dtype, and not every (system, engine) has
every dtype of every operation: SGLang and TRT-LLM on Blackwell have MLA context attention only
with bfloat16 activations (``mla_dtype``), and some MoE shapes only with block-scaled FP8. Rather
than dropping the whole deployment to the roofline, the operation whose data is missing is timed
at the nearest dtype that was measured, and the timing reason says so:

* FP8 attention (``fmha_quant``) -> bfloat16 attention kernels: the same FLOPs at the bf16
  tensor rate, so an upper bound for the attention part of a step (the rest stays measured);
* an FP8 KV cache set for the deployment (``kv_quant: fp8``) -> attention timed reading a
  bfloat16 cache: twice the bytes,
  an upper bound for the attention part (the cache's capacity is the FP8 one all the same);
* FP8 per-tensor MoE or GEMM <-> FP8 block-scaled: the same FP8 tensor-core rate; the block
  scales change the kernel a little, not the arithmetic.
* NVFP4 experts -> MXFP4 experts with FP8 activations (``w4a8_mxfp4_mxfp8``): both formats
  are 4-bit E2M1 weights with block scales (16-element FP8 scales against 32-element
  power-of-two ones), so a decode step reads the same expert bytes to within 6%, and the
  expert GEMMs run on FP8 tensor cores instead of FP4 ones (an upper bound for a prefill's).
  gpt-oss is published with MXFP4 experts and the benchmark rows label its 4-bit runs
  ``nvfp4``; the databases measured its experts only as MXFP4 (TensorRT-LLM on Blackwell
  with FP8 activations). The weight-only ``w4a16_mxfp4`` kernels are not substituted: they
  run the GEMMs at the BF16 rate, several times slower than the kernels the engines run on
  Blackwell, and timing gpt-oss's vLLM rows with them made them worse (docs/validation.md).

The rules key on the package's own missing-data messages (``context MLA data missing for
ContextKey { fmha_quant: "fp8" ...``, ``MoE data missing for MoeKey { quant: "fp8" ...``).
"""

from __future__ import annotations

import re
from dataclasses import replace

from agentsim.hardware.timing.deployment import Deployment

#: FP8 scaling variants that share the FP8 tensor-core rate.
_FP8_TWIN = {"fp8": "fp8_block", "fp8_block": "fp8"}
#: 4-bit expert formats and the measured one with the same weight bytes to time them with.
_FP4_NEXT = {"nvfp4": "w4a8_mxfp4_mxfp8"}


def nearest_precision(deployment: Deployment, message: str) -> tuple[Deployment, str] | None:
    """``(deployment with the missing operation's dtype replaced, what was replaced)`` for a
    missing-data ``message``, or None when no nearer measured dtype applies."""
    if re.search(r"(MLA|attention|FMHA) data missing", message, re.IGNORECASE) and 'fmha_quant: "fp8' in message:
        if deployment.fmha_quant != "bfloat16":
            return (replace(deployment, fmha_quant="bfloat16"),
                    "attention timed with bfloat16 kernels (the database has no FP8 attention data)")
    if re.search(r"(MLA|attention|FMHA) data missing", message, re.IGNORECASE) and 'kv_quant: "fp8' in message:
        if deployment.kv_quant == "fp8":  # set for the deployment (None: the model's own default)
            return (replace(deployment, kv_quant="bfloat16"),
                    "attention timed reading a bfloat16 KV cache (the database has no FP8-cache attention data)")
    moe = re.search(r'MoE data missing for MoeKey \{ quant: "(\w+)"', message)
    if moe and moe.group(1) in _FP8_TWIN and deployment.moe_quant in (moe.group(1), None):
        twin = _FP8_TWIN[moe.group(1)]
        return (replace(deployment, moe_quant=twin),
                f"MoE timed with {twin} kernels (the database has no {moe.group(1)} data for this shape)")
    if moe and moe.group(1) in _FP4_NEXT and deployment.moe_quant == moe.group(1):
        nearer = _FP4_NEXT[moe.group(1)]
        return (replace(deployment, moe_quant=nearer),
                f"MoE timed with {nearer} kernels (the database has no {moe.group(1)} data for this shape)")
    gemm = re.search(r'GEMM data missing for \w+ \{ quant: "(\w+)"', message, re.IGNORECASE)
    if gemm and gemm.group(1) in _FP8_TWIN and deployment.gemm_quant in (gemm.group(1), None):
        twin = _FP8_TWIN[gemm.group(1)]
        return (replace(deployment, gemm_quant=twin),
                f"GEMMs timed with {twin} kernels (the database has no {gemm.group(1)} data for this shape)")
    return None
