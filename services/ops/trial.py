"""``rlstack trial TASK_DIR``: one agent trial of one task, what a task author runs first.

The trial runs exactly as the agent env server runs its trials (``HarborEnvRunner.one_trial``:
the local sandbox, the proxy's records of its calls, assembly, ATIF, ``result.json``). An agent
that calls a model needs a proxy: ``--proxy-url`` names a running one (its ``--trials-dir`` must
be given too, since that is where it writes the trial's calls); without it, a registry, one vLLM
replica of ``--model`` and a proxy are started as local processes for this trial (the way
``rlstack up`` starts services) and stopped after it. ``oracle`` and ``nop`` call no model and
start nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from prometheus_client import CollectorRegistry
from pydantic import BaseModel, Field, SecretStr

from rlstack.common.model_families import ModelFamilyError, check_parsers, resolve_family
from rlstack.common.names import ID_PATTERN
from rlstack.envs.config import EnvSettings
from rlstack.episodes.harbor.dataset import Dataset
from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.trials.layout import TrialPaths
from rlstack.episodes.trials.records import AgentSpec
from rlstack.launcher.config import RunConfig, ServiceSpec
from rlstack.launcher.supervisor import Supervisor

log = logging.getLogger(__name__)
AgentChoice = Literal["builtin", "claude-code", "codex", "opencode", "oracle", "nop"]
DEFAULT_MODELS = {"builtin": Path("models/agent-demo"), "claude-code": Path("models/claude-code-demo"),
                  "codex": Path("models/codex-demo"), "opencode": Path("models/opencode-demo")}
"""What ``make run-agent`` (AGENT=claude-code|codex|opencode) builds; an ``--agent-command`` agent gets the built-in one's."""
VLLM_PYTHON = Path(".venv-vllm/bin/python")
PROXY_PYTHON = Path(".venv-proxy/bin/python")


class TrialRequest(BaseModel):
    """What ``rlstack trial`` was asked; the CLI's flags, checked."""

    task_dir: Path
    agent: AgentChoice = "builtin"
    agent_command: str | None = None
    """Any scaffold by command line (``{instruction}`` a word of its own); replaces ``agent``."""
    model: Path | None = None
    model_family: str | None = None
    """The model's family (``common.model_families``); unset, read from the model directory."""
    trials_dir: Path | None = None
    proxy_url: str | None = None
    trial_key_secret: SecretStr | None = None
    """The proxy's trial-key secret when it checks keys (``$RLSTACK_PROXY_TRIAL_KEY_SECRET``)."""
    run: str = Field(default="trial", pattern=ID_PATTERN)
    runs_dir: Path = Path("runs")
    max_turns: int = Field(default=8, ge=1)
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    agent_timeout_seconds: float | None = Field(default=None, gt=0)
    max_model_len: int | None = Field(default=None, ge=16)
    """vLLM --max-model-len of the replica started here (unset: the model's own)."""
    environment: Literal["image", "host"] = "image"
    """Where the trial runs: in the task's image, or (explicitly) on the host's tools."""

    @property
    def calls_model(self) -> bool:
        return self.agent_command is not None or self.agent not in ("oracle", "nop")


class TrialReport(BaseModel):
    """The JSON object ``rlstack trial`` prints as its last line."""

    status: str
    reward: float | None
    trial_dir: str
    task: str
    agent: str
    calls: int
    continued_calls: int
    """Calls that continued an earlier call's conversation: merged onto its exact ids, or a thread break."""
    merged_calls: int
    spliced_calls: int
    """Calls whose prompt the proxy spliced onto an earlier call's exact ids (token-in)."""
    thread_breaks: int
    failed_calls: int
    sequences: int
    trained_tokens: int
    merge_share: float | None
    error: str | None
    seconds: float
    logs: str | None = None
    """Where the services started for this trial wrote their logs."""


class TrialInputError(ValueError):
    """A flag that cannot work; the message names it."""


def check_request(req: TrialRequest) -> HarborTask:
    from rlstack.episodes.harbor.task import TaskError

    try:
        task = HarborTask.load(req.task_dir)
    except TaskError as exc:
        raise TrialInputError(f"TASK_DIR: {exc}") from None
    if req.agent_command is not None and req.agent != "builtin":
        raise TrialInputError(f"--agent-command: runs instead of --agent {req.agent}; give one of them")
    if req.proxy_url and req.calls_model and req.trials_dir is None:
        raise TrialInputError("--trials-dir: with --proxy-url, give that proxy's --trials-dir (where it writes the trial's calls)")
    if req.calls_model and not req.proxy_url:
        model = model_dir(req)
        if not (model / "config.json").is_file():
            raise TrialInputError(f"--model: {model} holds no model (config.json); build it with `make run-agent` "
                                  "(rlstack make-agent-demo) or name one")
        for python in (VLLM_PYTHON, PROXY_PYTHON):
            if not python.exists():
                raise TrialInputError(f"no {python}: run `make setup` (or pass --proxy-url of a running proxy)")
        try:
            check_parsers(resolve_family(model, req.model_family), str(VLLM_PYTHON))
        except ModelFamilyError as exc:
            raise TrialInputError(str(exc)) from None
    return task


def model_dir(req: TrialRequest) -> Path:
    return req.model or DEFAULT_MODELS.get(req.agent, DEFAULT_MODELS["builtin"])


def stack_config(req: TrialRequest, trials_dir: Path, run_dir: Path) -> RunConfig:
    """Registry, one replica of the model and the proxy writing into ``trials_dir``: what the trial calls."""
    inference = {"model": str(model_dir(req)), "vllm_port": "{inference.vllm}", "registry_url": "{registry.url}",
                 "replica_id": "trial-0", "heartbeat_seconds": 1, "kv_cache_gib": 1,
                 "max_model_len": req.max_model_len, "model_family": req.model_family}
    return RunConfig(name="trial", runs_dir=run_dir.parent, services=[
        ServiceSpec(name="registry", module="rlstack.registry", args=["--probe-interval-seconds", "1"]),
        ServiceSpec(name="inference", module="rlstack.inference", python=str(VLLM_PYTHON), extra_ports=["vllm"],
                    settings={k: v for k, v in inference.items() if v is not None}, ready_timeout_s=600),
        ServiceSpec(name="proxy", module="rlstack.proxy", python=str(PROXY_PYTHON), ready_timeout_s=300,
                    args=["--registry-url", "{registry.url}", "--trials-dir", str(trials_dir.resolve()),
                          "--watch-timeout-seconds", "2"]),
    ])


def run_one(req: TrialRequest) -> TrialReport:
    """Check the request, start what the trial needs, run it, stop what was started."""
    task = check_request(req)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = req.runs_dir / f"trial-{stamp}-{secrets.token_hex(2)}"
    trials_dir = req.trials_dir or run_dir / "trials"
    trials_dir.mkdir(parents=True, exist_ok=True)
    supervisor = None
    proxy_url, secret = req.proxy_url, req.trial_key_secret or _secret_from_env()
    try:
        if req.calls_model and not proxy_url:
            supervisor = Supervisor(stack_config(req, trials_dir, run_dir), run_dir)
            supervisor.start_all()
            proxy_url = supervisor.running["proxy"].url
            if supervisor.tokens is not None:  # the stack's proxy checks trial keys signed with its run's secret
                secret = SecretStr(supervisor.tokens.trial_key_secret)
        report = asyncio.run(_trial(req, task, trials_dir, proxy_url, secret))
    finally:
        if supervisor is not None:
            supervisor.stop_all()
    if supervisor is not None:
        report.logs = str(run_dir / "logs")
    return report


def _secret_from_env() -> SecretStr | None:
    value = os.environ.get("RLSTACK_PROXY_TRIAL_KEY_SECRET")
    return SecretStr(value) if value else None


async def _trial(req: TrialRequest, task: HarborTask, trials_dir: Path, proxy_url: str | None,
                 secret: SecretStr | None) -> TrialReport:
    from rlstack.envs.harbor_metrics import HarborMetrics
    from rlstack.envs.harbor_runner import HarborEnvRunner
    from rlstack.envs.harbor_tasks import HarborTasks
    from rlstack.envs.runner import EnvMetrics

    agent: dict = {"max_turns": req.max_turns, "timeout_seconds": req.agent_timeout_seconds}
    if req.agent_command:
        agent["command"] = req.agent_command
    elif req.agent in ("builtin", "claude-code", "codex", "opencode"):
        agent["name"] = req.agent
    fields: dict = {"proxy_url": proxy_url} if proxy_url else {}  # oracle and nop call no model: never dialled
    # No registry: one trial needs no weight version, and its token limit is not checked (nothing is posted).
    settings = EnvSettings(task="harbor", tasks_dir=task.path, run_id=req.run, name="trial", trial_key_secret=secret,
                           trials_dir=trials_dir, group_size=1, max_concurrent_trials=1, max_tokens=req.max_tokens,
                           temperature=req.temperature, agent=agent, scoring={"retries": 0},
                           sandbox={"environment": req.environment}, **fields)
    metrics = CollectorRegistry()
    # The dataset is the task alone: the agent's sandbox hides its directory, nothing around it.
    runner = HarborEnvRunner(settings, EnvMetrics(metrics), HarborMetrics(metrics),
                            tasks=HarborTasks(Dataset(root=task.path, tasks=(task,)), seed=0))
    agent = {"oracle": AgentSpec.oracle(), "nop": AgentSpec.nop()}.get(req.agent) if not req.agent_command else None
    trial = f"{task.short_name[:40]}-{secrets.token_hex(3)}"
    started = time.monotonic()
    try:
        outcome = await runner.one_trial(task, trial, agent)
    finally:
        await runner.aclose()
    result, assembly = outcome.result, outcome.assembly
    merged = assembly.merged_calls if assembly else 0
    breaks = assembly.thread_breaks if assembly else 0
    return TrialReport(
        status=result.status.value, reward=result.reward, trial_dir=str(TrialPaths.of(trials_dir, req.run, trial).root),
        task=task.name, agent=(agent or runner.agent).name, calls=assembly.calls if assembly else 0,
        continued_calls=merged + breaks, merged_calls=merged, spliced_calls=assembly.spliced_calls if assembly else 0,
        thread_breaks=breaks, failed_calls=assembly.failed_calls if assembly else 0,
        sequences=len(assembly.sequences) if assembly else 0,
        trained_tokens=sum(s.trained_tokens for s in assembly.sequences) if assembly else 0,
        merge_share=assembly.merge_share if assembly else None, error=result.error,
        seconds=round(time.monotonic() - started, 3))


def summary_lines(report: TrialReport) -> list[str]:
    """The readable part, before the JSON line."""
    reward = "none (not scored)" if report.reward is None else f"{report.reward:g}"
    lines = [f"task      {report.task}", f"agent     {report.agent}",
             f"status    {report.status}" + (f": {report.error}" if report.error else ""), f"reward    {reward}",
             f"calls     {report.calls} ({report.continued_calls} continued: {report.merged_calls} on exact ids, "
             f"{report.thread_breaks} thread breaks; {report.spliced_calls} spliced by the proxy; "
             f"{report.failed_calls} failed)",
             f"trained   {report.trained_tokens} tokens in {report.sequences} sequence(s)",
             f"trial     {report.trial_dir}  (result.json, agent/, verifier/, the calls' JSONL)",
             f"took      {report.seconds:.1f}s"]
    if report.logs:
        lines.append(f"logs      {report.logs}  (registry, replica, proxy started for this trial)")
    return lines
