"""Drive a real agent CLI (claude-code, codex or opencode) through the real proxy with the scripted teacher
behind it, and keep what the agent really sent: its demo policy's warm-start corpus.

One real registry and one real proxy (LiteLLM, ``.venv-proxy``) as processes; the teacher
(``teacher.py``) served on loopback and registered like a vLLM replica; each generated task run
as a real trial (``run_trial`` in the local bubblewrap sandbox) whose verifier scores it. The
teacher's record of every call is written to ``<out>/exchanges.jsonl`` with the trials' results.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

import httpx
import uvicorn
from pydantic import BaseModel, Field

from rlstack.common.names import SERVED_MODEL_NAME
from rlstack.common.ports import free_port
from rlstack.common.process import ServiceProcess, start_process
from rlstack.episodes.agents import (
    CLAUDE_CODE_BIN,
    CODEX_BIN,
    OPENCODE_BIN,
    SUB_AGENT_MODEL,
    AgentLimits,
    builtin_agent,
    claude_code_agent,
    codex_agent,
    opencode_agent,
    trial_env,
)
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.harbor.make_tasks import TaskSpec, write_task
from rlstack.episodes.sandboxes import build_sandbox
from rlstack.episodes.sandboxes.config import LocalSandboxConfig
from rlstack.episodes.trials.records import AgentSpec, TrialSpec
from rlstack.episodes.trials.run import run_trial
from rlstack.modelkit.teacher.scripted import Teacher

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2].parent
PROXY_PYTHON = REPO / ".venv-proxy" / "bin" / "python"
RUN = "teacher"


Agent = Literal["claude-code", "claude-code-subagents", "claude-code-team", "codex", "opencode", "builtin"]
"""``claude-code-team``: the lead and a ``worker`` sub-agent whose definition asks for ``model: haiku``, as
a two-policy run's trials start it (``envs`` with ``sub_agent_policy``), each doing part of a task."""



class CaptureSpec(BaseModel):
    concurrency: int = Field(default=4, ge=1, le=32)
    """Trials at once (each a claude-code process of ~200 MB)."""
    agent_timeout_sec: float = Field(default=120, gt=0)
    agent: Agent = "claude-code"
    agent_bin: Path | None = None
    """The agent's binary; the pinned npm install when unset."""
    served_model_name: str = SERVED_MODEL_NAME

    def agent_spec(self) -> AgentSpec:
        if self.agent == "codex":
            return codex_agent(self.agent_bin or CODEX_BIN)
        if self.agent == "opencode":
            return opencode_agent(self.agent_bin or OPENCODE_BIN)
        if self.agent == "builtin":
            return builtin_agent(AgentLimits())
        if self.agent == "claude-code-subagents":
            return claude_code_agent(self.agent_bin or CLAUDE_CODE_BIN, subagents=True)
        if self.agent == "claude-code-team":
            return claude_code_agent(self.agent_bin or CLAUDE_CODE_BIN, subagents=True, sub_agent_model="haiku")
        return claude_code_agent(self.agent_bin or CLAUDE_CODE_BIN)


class CaptureResult(BaseModel):
    trials: int
    ok: int
    solved: int
    exchanges: int
    seconds: float
    statuses: dict[str, str]


class _TeacherServer:
    """The teacher on a loopback port, in a thread of this process."""

    def __init__(self, teacher: Teacher) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(teacher.app(), host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="teacher", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> _TeacherServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the teacher did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _service(name: str, args: list[str], logs: Path, python: Path | str, timeout: float) -> ServiceProcess:
    port = free_port()
    svc = start_process(name, [str(python), "-m", f"rlstack.{name}", "--port", str(port), *args], port,
                        logs / f"{name}.log", cwd=REPO)
    try:
        svc.wait_ready(timeout=timeout)
    except Exception:
        svc.terminate()
        raise
    return svc


async def _trials(tasks_dir: Path, trials_dir: Path, proxy_url: str, spec: CaptureSpec) -> dict[str, tuple[str, float | None]]:
    agent = spec.agent_spec()
    sandbox = build_sandbox(LocalSandboxConfig(environment="host"))
    sandbox.check()
    dataset = load_dataset(tasks_dir)
    slots = asyncio.Semaphore(spec.concurrency)

    async def one(index: int, task) -> tuple[str, tuple[str, float | None]]:  # noqa: ANN001 - a HarborTask
        trial = f"t{index}"
        env = trial_env(agent, proxy_url, RUN, trial, "open", spec.served_model_name,
                        haiku_model=SUB_AGENT_MODEL if spec.agent == "claude-code-team" else None)
        trial_spec = TrialSpec(run=RUN, trial=trial, task=task, agent=agent, env=env,
                               agent_timeout_sec=spec.agent_timeout_sec, private_paths=[dataset.root])
        async with slots:
            result = await run_trial(trial_spec, sandbox, trials_dir)
        log.info("trial %s (%s): %s reward %s %s", trial, task.short_name, result.status, result.reward, result.error or "")
        return task.short_name, (result.status.value, result.reward)

    return dict(await asyncio.gather(*(one(i, t) for i, t in enumerate(dataset.tasks))))


def capture(tasks: list[TaskSpec], out: Path, spec: CaptureSpec | None = None) -> CaptureResult:
    """Run every task once with the agent and the teacher; write ``exchanges.jsonl`` and ``capture.json``."""
    spec = spec or CaptureSpec()
    if not PROXY_PYTHON.exists():
        raise FileNotFoundError(f"no {PROXY_PYTHON}: run `make setup-proxy`")
    out.mkdir(parents=True, exist_ok=True)
    teacher = Teacher(tasks, served_model_name=spec.served_model_name, team=spec.agent == "claude-code-team")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rlstack-capture-") as scratch:
        work = Path(scratch)
        for task in tasks:
            write_task(task, work / "tasks")
        registry = _service("registry", ["--probe-interval-seconds", "0.5"], out / "logs", sys.executable, 30)
        proxy = None
        try:
            with _TeacherServer(teacher) as server:
                registration = {"url": server.url, "model": spec.served_model_name, "ttl_seconds": 3600}
                httpx.put(f"{registry.url}/v1/endpoints/teacher", json=registration, timeout=10).raise_for_status()
                proxy = _service("proxy", ["--registry-url", registry.url, "--trials-dir", str(work / "trials"),
                                           "--served-model-name", spec.served_model_name, "--watch-timeout-seconds", "2"],
                                 out / "logs", PROXY_PYTHON, 300)
                results = asyncio.run(_trials(work / "tasks", work / "trials", proxy.url, spec))
        finally:
            if proxy is not None:
                proxy.terminate()
            registry.terminate()
    exchanges = teacher.dump()
    with (out / "exchanges.jsonl").open("w") as f:
        for exchange in exchanges:
            f.write(json.dumps(exchange) + "\n")
    result = CaptureResult(trials=len(results), ok=sum(s == "ok" for s, _ in results.values()),
                           solved=sum(r == 1.0 for _, r in results.values()), exchanges=len(exchanges),
                           seconds=time.monotonic() - started,
                           statuses={name: f"{s} {r}" for name, (s, r) in sorted(results.items())})
    (out / "capture.json").write_text(result.model_dump_json(indent=2))
    return result
