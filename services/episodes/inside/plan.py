"""``plan.json``: what the env server asks of a trial pod's driver, staged beside the tests.

One model for both ends (the env server writes it, the driver in the pod reads it, from the
bundle's own pydantic), so a field renamed on one side cannot be silently missing on the other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PLAN = "plan.json"


class PhasePlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    """On top of the container's own (the image's ENV and the pod's)."""
    timeout: float = Field(gt=0)


class TrialPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: PhasePlan
    verifier: PhasePlan
    kill_grace: float = Field(default=2.0, ge=0)
    """Seconds between SIGTERM and SIGKILL when a phase runs out of time."""
