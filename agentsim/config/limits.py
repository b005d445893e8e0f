"""Size limits of a scenario, checked before anything is allocated.

A scenario can ask for more than any machine holds with a few characters
(``instances: 10000000``, ``concurrent: 1000000000``, ``rate_per_s: 1e308``), and the engine
would start allocating before noticing. These limits are far above every shipped scenario and
every study in docs/ (the largest uses 64 instances and a few thousand sessions), and each can be
raised on purpose in the scenario's ``limits:`` section, which the message names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentsim.config.units import Seconds


class Limits(BaseModel):
    """Upper bounds on what one scenario may ask for (raise them here when a study needs more)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_instances: int = Field(4096, gt=0, description="serving instances (hardware.instances)")
    max_concurrent_sessions: int = Field(1_000_000, gt=0, description="sessions kept alive by population arrivals, all classes together")
    max_expected_sessions: float = Field(10_000_000, gt=0, description="sessions Poisson arrivals start on average over duration_s, at the peak rate")
    max_duration_s: Seconds = Field(366 * 86400.0, gt=0, description="simulated time (duration_s): one year")
    max_prompt_tokens: int = Field(10_000_000, gt=0, description="longest prompt (shared prefixes plus max_context_tokens) in tokens")
    max_batch_requests: int = Field(1_000_000, gt=0, description="serving.max_batch_requests")


def limit_hint(name: str) -> str:
    """The sentence every limit message ends with."""
    return f"raise limits.{name} in the scenario if this is intended"
