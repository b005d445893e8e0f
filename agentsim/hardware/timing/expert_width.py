"""Step tables for an expert-parallel width the measured databases lack, from the widths they have.

aiconfigurator-core measures its MoE kernels at expert-parallel widths that are powers of two
(8 to 256 ranks for DeepSeek-R1 with SGLang on gb200 / gb300). Deployments are not bound to them: Dynamo's SGLang
recipes for DeepSeek-R1 on GB200 / GB300 run decode workers of 24 or 48 attention-DP ranks with
the experts spread over all of them, and the databases then have no ``moe_ep_size: 24`` data.
Rather than timing such a worker on the roofline (whose DEP-24 decode step came out 2-2.5x too
fast), it is timed between the two measured widths around it.

How. With attention data parallelism each rank serves its own batch, so every table (in
per-rank terms: ``tokens``, ``batch``) has the same meaning at every width; what the width
changes is the MoE block: fewer experts per rank (fewer weight bytes read), but tokens from more
ranks arriving at the rank of the most popular experts (routing is skewed: the databases' power
law) and a wider dispatch/combine. In the databases the second effect wins and a decode step
grows about linearly with the width (DeepSeek-R1 FP8 on gb200, 64 sequences a rank at 5,120
tokens of context: 38.4 / 48.1 / 72.7 ms at 16 / 32 / 64 ranks). Each table entry is therefore
interpolated linearly in ``ep`` between the measured powers of two ``lo < ep < 2 lo`` (DEP-24 is
the mean of DEP-16 and DEP-32); weighting by ``1 / ep`` instead (the weight-read term alone)
moves DEP-24 by under 4%. Only interpolation is done, never extrapolation beyond the widths
measured, and the timing reason names both widths.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from agentsim.hardware.timing.deployment import Deployment
from agentsim.hardware.timing.tables import StepTables

_MISSING_WIDTH = re.compile(r"MoE data missing for MoeKey \{[^}]*moe_ep_size: (\d+)")


def missing_expert_width(message: str) -> int | None:
    """The expert-parallel width a missing-MoE-data ``message`` names, or None."""
    found = _MISSING_WIDTH.search(message)
    return int(found.group(1)) if found else None


def neighbour_widths(deployment: Deployment) -> tuple[Deployment, Deployment, float] | None:
    """``(lower, upper, weight_of_lower)``: the deployment at the powers of two either side of its
    expert-parallel width, the ranks that carry the width (attention-DP ranks, else the tensor
    ranks) scaled with it, and the weight of the lower one (linear in ``ep``); None when the width is
    a power of two already, or neither rank kind scales to both neighbours."""
    ep = deployment.moe_ep or 1
    if ep < 2 or ep & (ep - 1) == 0:
        return None
    lo = 1 << (ep.bit_length() - 1)
    hi = lo << 1
    width = deployment.tp * deployment.attention_dp
    if (deployment.moe_tp or 1) * ep != width:
        return None
    ranks = "attention_dp" if deployment.attention_dp > 1 else "tp"
    carried = getattr(deployment, ranks)
    lower, upper = carried * lo, carried * hi
    if lower % ep or upper % ep:
        return None
    at = {w: replace(deployment, moe_ep=w, **{ranks: carried * w // ep}) for w in (lo, hi)}
    weight_lo = (hi - ep) / (hi - lo)
    return at[lo], at[hi], weight_lo


def interpolate(lower: StepTables, upper: StepTables, weight_lower: float, note: str) -> StepTables:
    """``weight_lower * lower + (1 - weight_lower) * upper`` entry by entry (both tables were
    built on the same grids: the grids depend on the engine caps, not the width)."""
    if (lower.tokens, lower.news, lower.contexts, lower.batches) != (upper.tokens, upper.news, upper.contexts, upper.batches):
        raise ValueError("expert-width neighbours were tabulated on different grids")
    w = weight_lower

    def mix(a, b) -> list:
        return (w * np.asarray(a, dtype=float) + (1.0 - w) * np.asarray(b, dtype=float)).tolist()

    return StepTables(lower.tokens, lower.news, lower.contexts, lower.batches,
                      mix(lower.non_attention_s, upper.non_attention_s),
                      mix(lower.chunk_attention_s, upper.chunk_attention_s),
                      mix(lower.decode_attention_s, upper.decode_attention_s),
                      mix(lower.decode_s, upper.decode_s),
                      f"{lower.provenance}; {note}")
