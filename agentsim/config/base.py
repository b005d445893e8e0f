"""The base of every scenario model: strict (no unknown keys, finite numbers) and a registered
component referred to by name with its parameters."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    # Infinity and NaN are never a valid setting (`rate_per_s: .inf` would hang the run,
    # `min: .nan` compares false with everything): every float field must be finite.
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class PolicyRef(Strict):
    """A registered policy by name, with its own validated parameters."""

    name: str = Field("lru", description="registered policy name (see `agentsim policies`)")
    params: dict[str, Any] = Field(default_factory=dict, description="policy parameters")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"name": value}
        return value
