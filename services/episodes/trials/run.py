"""One trial end to end: sandbox (agent, then verifier), reward, status, ``result.json``.

The same for every backend: the sandbox only runs processes and leaves their output in the
trial directory; this module decides what happened. Once the trial directory is set up, every
way out of ``run_trial`` writes ``result.json``, cancellation included (status ``infra_error``,
then the cancel goes on).
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

from rlstack.common import safefs
from rlstack.common.trial_keys import KEY_MARGIN_SECONDS
from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.sandboxes.base import (
    LOGS_AGENT,
    PhaseOutcome,
    Sandbox,
    SandboxError,
    SandboxJob,
)
from rlstack.episodes.trials.layout import TrialPaths
from rlstack.episodes.trials.records import (
    INSTRUCTION_PLACEHOLDER,
    AgentRecord,
    PhaseRecord,
    TaskRecord,
    TrialResult,
    TrialSpec,
    TrialStatus,
    VerifierRecord,
)
from rlstack.episodes.trials.reward import RewardError, read_rewards, scalar_reward

log = logging.getLogger(__name__)

DEFAULT_AGENT_TIMEOUT_SEC = 600.0
"""When neither the trial nor ``[agent].timeout_sec`` sets one: never an unbounded agent."""


class TrialExists(FileExistsError):
    """The trial directory already holds a result: each attempt needs its own trial id."""


async def run_trial(spec: TrialSpec, sandbox: Sandbox, trials_dir: Path) -> TrialResult:
    paths = TrialPaths.of(trials_dir, spec.run, spec.trial)
    if os.path.lexists(paths.result):
        raise TrialExists(f"{paths.result} exists: give each trial (and each attempt) its own id")
    Path(trials_dir).mkdir(parents=True, exist_ok=True)
    for directory in (paths.agent_dir, paths.verifier_dir):  # never through a symlink below the trials dir
        safefs.makedirs(directory, within=Path(trials_dir))
    safefs.write_text(paths.instruction, spec.task.instruction, within=paths.root)
    agent_timeout = agent_timeout_of(spec.task, spec.agent_timeout_sec)
    verifier_timeout = spec.verifier_timeout_sec or spec.task.config.verifier.timeout_sec
    job = SandboxJob(
        run=spec.run, trial=spec.trial, task=spec.task,
        agent_command=_instructed(spec.agent.command, spec.task),
        agent_image_command=_instructed(spec.agent.image_command, spec.task) if spec.agent.image_command else None,
        agent_env={**spec.agent.env, **spec.env, **identity_env(spec)},
        agent_timeout_sec=agent_timeout, verifier_timeout_sec=verifier_timeout,
        agent_dir=paths.agent_dir, verifier_dir=paths.verifier_dir, mount_solution=spec.agent.mount_solution,
        private_paths=[*spec.private_paths, spec.task.path, Path(trials_dir).resolve() / spec.run])
    result = TrialResult(
        run=spec.run, trial=spec.trial, attempt=spec.attempt, sandbox=sandbox.kind,
        task=TaskRecord(name=spec.task.name, path=spec.task.path, schema_version=spec.task.config.schema_version),
        agent=AgentRecord(name=spec.agent.name, command=spec.agent.command), verifier=VerifierRecord(),
        status=TrialStatus.INFRA_ERROR, started_at=datetime.now(UTC), finished_at=datetime.now(UTC))
    try:
        outcome = await sandbox.run(job)
    except asyncio.CancelledError:
        _finish(paths, result, error="cancelled while running")
        raise
    except SandboxError as exc:
        log.warning("trial %s/%s: sandbox failed: %s", spec.run, spec.trial, exc)
        return _finish(paths, result, error=str(exc))
    except Exception as exc:  # a bug in a backend must not take the env server down, nor score 0
        log.exception("trial %s/%s: sandbox raised", spec.run, spec.trial)
        return _finish(paths, result, error=f"{type(exc).__name__}: {exc}")
    result.image, result.sandbox_start = outcome.image, outcome.start
    if outcome.agent_argv == "image_command" and spec.agent.image_command:  # the bundle's, not the host's
        result.agent.command = list(spec.agent.image_command)
    result.start_seconds = round((outcome.agent.started_at - result.started_at).total_seconds(), 4)
    result.agent.run = _record(outcome.agent, agent_timeout)
    result.verifier.run = _record(outcome.verifier, verifier_timeout)
    return _finish(paths, result, **_judge(outcome.agent, outcome.verifier, paths, result.verifier, verifier_timeout))


def _instructed(command: list[str], task: HarborTask) -> list[str]:
    return [task.instruction if arg == INSTRUCTION_PLACEHOLDER else arg for arg in command]


def agent_timeout_of(task: HarborTask, override: float | None = None) -> float:
    return override or task.config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC


def trial_key_ttl(task: HarborTask, override: float | None = None, start_allowance: float = 0.0) -> float:
    """How long the trial's key must live: the agent's whole time, plus what its sandbox may take to
    start (a cold pod on a busy node: minutes, all before the agent's first call), plus a margin; not days."""
    return agent_timeout_of(task, override) + start_allowance + KEY_MARGIN_SECONDS


def identity_env(spec: TrialSpec) -> dict[str, str]:
    return {"RLSTACK_RUN": spec.run, "RLSTACK_TRIAL": spec.trial, "RLSTACK_ATTEMPT": str(spec.attempt),
            "RLSTACK_TASK": spec.task.name, "RLSTACK_INSTRUCTION_FILE": f"{LOGS_AGENT}/instruction.md"}


def _judge(agent: PhaseOutcome, verifier: PhaseOutcome, paths: TrialPaths, record: VerifierRecord,
           verifier_timeout: float) -> dict:
    """Status, reward and error from how both phases ended and what the verifier wrote."""
    reward = None
    if verifier.timed_out:
        record.error = f"verifier timed out after {verifier_timeout:g}s"
    else:
        try:
            record.rewards = read_rewards(paths.verifier_dir, within=paths.root)
            reward = scalar_reward(record.rewards)
        except RewardError as exc:
            record.error = str(exc)
    if agent.timed_out:
        return {"status": TrialStatus.AGENT_TIMEOUT, "error": "agent timed out"}
    if agent.exit_code != 0:
        return {"status": TrialStatus.AGENT_ERROR, "error": f"agent exited with {agent.exit_code}"}
    if record.error is not None:
        return {"status": TrialStatus.VERIFIER_ERROR, "error": record.error}
    return {"status": TrialStatus.OK, "reward": reward}


def _record(outcome: PhaseOutcome, timeout: float) -> PhaseRecord:
    return PhaseRecord(**outcome.model_dump(), timeout_sec=timeout)


def _finish(paths: TrialPaths, result: TrialResult, *, status: TrialStatus = TrialStatus.INFRA_ERROR,
            reward: float | None = None, error: str | None = None) -> TrialResult:
    result.status, result.reward, result.error = status, reward, error
    result.finished_at = datetime.now(UTC)
    return write_result(paths, result)


def write_result(paths: TrialPaths, result: TrialResult) -> TrialResult:
    # A fresh temp name renamed over result.json: readers never see half a result, and nothing
    # planted under either name is written through.
    safefs.write_text(paths.result, result.model_dump_json(indent=2) + "\n", within=paths.root)
    return result
