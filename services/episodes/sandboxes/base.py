"""The seam between a trial and where it runs: one ``Sandbox`` protocol, one job, one outcome.

A backend runs the agent and then the verifier over the same workspace, each under its
timeout, and leaves their output in the trial's ``agent/`` and ``verifier/`` directories.
It never decides a reward or a status: the trial runner reads the reward file and judges.
Anything the backend itself fails at (no bubblewrap, a pod never scheduled) is a
``SandboxError``, which the runner records as ``infra_error``, never as a reward of 0.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rlstack.episodes.harbor.task import HarborTask

# Where a Harbor task expects things, inside every sandbox.
APP = "/app"
LOGS_AGENT = "/logs/agent"
LOGS_VERIFIER = "/logs/verifier"
TESTS = "/tests"
SOLUTION = "/solution"
TEST_SCRIPT = f"{TESTS}/test.sh"

# What a backend leaves behind in the directories it is given.
AGENT_STDOUT = "stdout.txt"
AGENT_STDERR = "stderr.txt"
AGENT_EXIT_CODE = "exit_code.txt"
VERIFIER_OUTPUT = "test-stdout.txt"
STAGE = ".sandbox"
"""Inside a pod's trial directory: the task's files for the pod (workspace seed, tests, solution)."""


class SandboxError(RuntimeError):
    """The sandbox failed, not the agent or the verifier: an infra error."""


class SandboxUnavailable(SandboxError):
    """This backend cannot run here at all (missing tool, no permission); says how to fix it."""


class SandboxJob(BaseModel):
    """Everything one trial needs from its sandbox."""

    model_config = ConfigDict(frozen=True)

    run: str
    trial: str
    task: HarborTask
    agent_command: list[str] = Field(min_length=1)
    agent_image_command: list[str] | None = None
    """The agent's argv inside a task image (its runtime from the agent bundle); None: ``agent_command``."""
    agent_env: dict[str, str] = Field(default_factory=dict)
    """The agent's whole environment beyond a minimal PATH/HOME: proxy URLs, key, trial identity."""
    agent_timeout_sec: float = Field(gt=0)
    verifier_timeout_sec: float = Field(gt=0)
    agent_dir: Path
    """Host directory for the agent's stdout/stderr/exit code; the agent sees it as /logs/agent."""
    verifier_dir: Path
    """Host directory the verifier sees as /logs/verifier; the reward file lands here."""
    mount_solution: bool = False
    """Show the task's solution/ at /solution (the reference-solution agent only)."""
    private_paths: list[Path] = Field(default_factory=list)
    """Host paths the agent must not read: datasets (tests, solutions), other trials."""

    @property
    def trial_dir(self) -> Path:
        """The trial's directory: trusted (the env server made it), unlike the agent's log directory in it."""
        return self.agent_dir.parent


class PhaseOutcome(BaseModel):
    """How one process (agent or verifier) ended."""

    started_at: datetime
    finished_at: datetime
    exit_code: int | None = None
    """The process's exit code; negative for a signal; None if it never started."""
    timed_out: bool = False


class SandboxOutcome(BaseModel):
    agent: PhaseOutcome
    verifier: PhaseOutcome
    image: str | None = None
    """The image both phases ran in (reference with its digest); None: the host's tools."""
    start: Literal["warm", "cold"] | None = None
    """A pod's: claimed from the warm pool, or created for the trial; None: a local sandbox."""
    agent_argv: Literal["command", "image_command"] = "command"
    """Which of the job's agent commands ran: ``image_command`` (the agent bundle's) in an image or a
    pod when the job has one, ``command`` on the host's tools."""


class Sandbox(Protocol):
    """Runs trials somewhere: ``local`` (bubblewrap on this host), later ``kubernetes`` (a pod each)."""

    kind: str

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` with the fix if this backend cannot run here."""
        ...

    async def run(self, job: SandboxJob) -> SandboxOutcome:
        """Agent, then verifier; kills everything on timeout or when the calling task is cancelled."""
        ...

    async def close(self) -> None:
        """Kill every sandbox still running (shutdown)."""
        ...
