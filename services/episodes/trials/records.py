"""What a trial is (``TrialSpec``) and what it leaves behind (``TrialResult``, its ``result.json``).

``reward`` is set only for ``ok`` trials: it is the number training may use. A trial the agent
did not finish (timeout, crash) keeps whatever the verifier wrote under ``verifier.rewards``
for inspection, and an infra failure has no reward at all; none of them is a wrong answer.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from rlstack.common.trial_keys import NAME
from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.sandboxes.base import SOLUTION

INSTRUCTION_PLACEHOLDER = "{instruction}"


class AgentSpec(BaseModel):
    """An agent is a command run in /app; any that honours OPENAI_BASE_URL/ANTHROPIC_BASE_URL works."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    command: list[str] = Field(min_length=1)
    """Arguments equal to ``{instruction}`` are replaced by the task's instruction; the instruction is
    also at ``$RLSTACK_INSTRUCTION_FILE`` (/logs/agent/instruction.md)."""
    env: dict[str, str] = Field(default_factory=dict)
    """The agent's own settings (e.g. CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC)."""
    mount_solution: bool = False
    image_command: list[str] | None = None
    """The command inside a task image, where the agent's runtime comes from the agent bundle at
    /opt/rlstack; None: ``command`` as it is (the image's own programs, or the host's)."""

    @classmethod
    def oracle(cls) -> AgentSpec:
        """Runs the task's reference solution: proves a task can be solved (reward 1.0)."""
        return cls(name="oracle", command=["bash", f"{SOLUTION}/solve.sh"], mount_solution=True)

    @classmethod
    def nop(cls) -> AgentSpec:
        """Does nothing: proves a task is not solved by its starting state (reward 0)."""
        return cls(name="nop", command=["true"])


class TrialSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    run: str = Field(pattern=NAME)
    trial: str = Field(pattern=NAME)
    """Unique within the run, per attempt: the proxy files the trial's model calls under it."""
    attempt: int = Field(default=1, ge=1)
    task: HarborTask
    agent: AgentSpec
    env: dict[str, str] = Field(default_factory=dict)
    """From the caller: OPENAI_BASE_URL, ANTHROPIC_BASE_URL, the trial key, ..."""
    agent_timeout_sec: float | None = Field(default=None, gt=0)
    """Overrides ``[agent].timeout_sec``."""
    verifier_timeout_sec: float | None = Field(default=None, gt=0)
    """Overrides ``[verifier].timeout_sec``."""
    private_paths: list[Path] = Field(default_factory=list)
    """More host paths to hide from the agent (the dataset's root, say); the task's own directory
    and the run's trials are always hidden."""


class TrialStatus(StrEnum):
    OK = "ok"
    AGENT_TIMEOUT = "agent_timeout"
    AGENT_ERROR = "agent_error"
    VERIFIER_ERROR = "verifier_error"
    INFRA_ERROR = "infra_error"


class PhaseRecord(BaseModel):
    started_at: datetime
    finished_at: datetime
    exit_code: int | None = None
    timed_out: bool = False
    timeout_sec: float

    @computed_field
    @property
    def seconds(self) -> float:
        return round((self.finished_at - self.started_at).total_seconds(), 3)


class TaskRecord(BaseModel):
    name: str
    path: Path
    schema_version: str


class AgentRecord(BaseModel):
    name: str
    command: list[str]
    run: PhaseRecord | None = None
    """None when the sandbox failed before the agent ran."""


class VerifierRecord(BaseModel):
    run: PhaseRecord | None = None
    rewards: dict[str, float] | None = None
    """As the verifier wrote them (reward.json's keys, or ``reward`` from reward.txt)."""
    error: str | None = None
    """Why no reward could be read."""


class TrajectoryStats(BaseModel):
    """How the trial's model calls assembled into training sequences (set by the agent env)."""

    calls: int
    merged_calls: int
    thread_breaks: int
    failed_calls: int
    retried_calls: int = 0
    sequences: int
    trained_tokens: int
    merge_share: float | None = None
    spliced_calls: int = 0
    """Calls the proxy sent on an earlier call's exact ids (token-in)."""
    edited_segments: int = 0
    """Calls whose history the agent itself changed (compaction): new segments, not breaks."""
    segments: dict[str, int] = Field(default_factory=dict)
    """Trained sequences by kind: main, sub_agent, side_call, after_compaction, retry, break."""
    policies: dict[str, int] = Field(default_factory=dict)
    """Trained sequences by the policy that served them: the policies the trial took part in
    (empty for calls logged before policies)."""


class TrialResult(BaseModel):
    """``<trials>/<run>/<trial>/result.json``."""

    run: str
    trial: str
    attempt: int
    sandbox: str
    image: str | None = None
    """The task image both phases ran in (reference with its digest); None: the host's tools (or no sandbox)."""
    sandbox_start: Literal["warm", "cold"] | None = None
    """A pod's: claimed from the warm pool, or created for this trial; None: a local sandbox."""
    start_seconds: float | None = None
    """From the trial's start to the agent's first instruction (the sandbox's start, a claim's latency)."""
    task: TaskRecord
    agent: AgentRecord
    verifier: VerifierRecord
    status: TrialStatus
    reward: float | None = None
    error: str | None = None
    started_at: datetime
    finished_at: datetime
    trajectory: TrajectoryStats | None = None

    @computed_field
    @property
    def seconds(self) -> float:
        return round((self.finished_at - self.started_at).total_seconds(), 3)
