"""The ``local`` backend on the host's tools (``environment: host``): agent and verifier under bubblewrap.

An explicit choice for tasks that need nothing beyond the host's programs; by default the local
backend runs each trial in its task's image instead (``image.py``). This one says so per run.

Per trial: a workspace directory filled with the task's environment files, then the agent
(workspace at /app, its log directory at /logs/agent) and then the verifier (same workspace,
tests at /tests, /logs/verifier), each a child process group with its own timeout. The
workspace is removed afterwards. Resource limits of ``task.toml`` are not enforced here (the
kubernetes backend sets them on the pod). Each phase has its own network namespace; the agent
reaches the proxy named by its ``*_BASE_URL`` through ``netbridge`` and nothing else on the host.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from rlstack.common import safefs
from rlstack.episodes.sandboxes.base import (
    AGENT_EXIT_CODE,
    AGENT_STDERR,
    AGENT_STDOUT,
    APP,
    LOGS_AGENT,
    LOGS_VERIFIER,
    SOLUTION,
    TEST_SCRIPT,
    TESTS,
    VERIFIER_OUTPUT,
    PhaseOutcome,
    SandboxError,
    SandboxJob,
    SandboxOutcome,
    SandboxUnavailable,
)
from rlstack.episodes.sandboxes.bwrap import Bind, StatusPipe, bwrap_argv, runtime_paths
from rlstack.episodes.sandboxes.config import LocalSandboxConfig
from rlstack.episodes.sandboxes.netbridge import HostBridge
from rlstack.episodes.sandboxes.procgroup import kill_group, run_group
from rlstack.episodes.sandboxes.proxy_urls import inside_addresses

log = logging.getLogger(__name__)

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; `make setup-sandbox`)"
NET_DIR = "/tmp/.rlstack-net"
"""Inside the sandbox: the unix sockets that lead to the proxy."""
BRIDGE = Path(__file__).with_name("netbridge.py")
_WARNED_RUNS: set[str] = set()


class LocalSandbox:
    kind = "local"

    def __init__(self, config: LocalSandboxConfig | None = None) -> None:
        self.config = config or LocalSandboxConfig()
        self.work_dir = self.config.work_dir or Path(tempfile.gettempdir()) / "rlstack-sandboxes"
        self._active: dict[str, int] = {}  # "run/trial/phase" -> process group id
        self._checked = False

    def active(self) -> dict[str, int]:
        """Running phases and their process group ids (metrics, tests)."""
        return dict(self._active)

    def check(self) -> None:
        """Start one trivial sandbox; raise ``SandboxUnavailable`` with the fix if it cannot."""
        if self._checked:
            return
        if shutil.which(self.config.bwrap) is None:
            raise SandboxUnavailable(f"local sandbox: {self.config.bwrap!r} not found: {INSTALL_HINT}")
        with tempfile.TemporaryDirectory() as scratch:
            argv = bwrap_argv(self.config.bwrap, binds=[Bind(Path(scratch), APP, writable=True)], hide=[],
                              command=["sh", "-c", f"touch {APP}/ok"], chdir=APP, unshare_net=self._isolated)
            try:
                done = subprocess.run(argv, env={"PATH": self.config.path}, capture_output=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxUnavailable(f"local sandbox: bwrap did not run: {exc}") from None
            if done.returncode != 0 or not (Path(scratch) / "ok").exists():
                raise SandboxUnavailable(
                    f"local sandbox: bwrap cannot create a sandbox here (exit {done.returncode}: "
                    f"{done.stderr.decode(errors='replace').strip()}); it needs root or unprivileged user "
                    "namespaces (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1)")
        self._checked = True

    async def run(self, job: SandboxJob) -> SandboxOutcome:
        await asyncio.to_thread(self.check)
        if job.run not in _WARNED_RUNS:  # once per run and process, loudly: no task of it runs in its own image
            _WARNED_RUNS.add(job.run)
            log.warning("run %s: trials run on the HOST's tools, not in their tasks' images (sandbox environment: host, "
                        "first task %s); a task that needs its image will fail or score 0 here", job.run, job.task.name)
        workspace = await asyncio.to_thread(self._make_workspace, job)
        try:
            agent = await self._agent(job, workspace)
            verifier = await self._verifier(job, workspace)
            return SandboxOutcome(agent=agent, verifier=verifier)
        finally:
            if not self.config.keep_workspaces:
                shutil.rmtree(workspace, ignore_errors=True)

    async def close(self) -> None:
        for pgid in self._active.values():
            kill_group(pgid)
        self._active.clear()

    def _make_workspace(self, job: SandboxJob) -> Path:
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            workspace = Path(tempfile.mkdtemp(prefix=f"{job.run}-{job.trial}-", dir=self.work_dir))
            for entry in job.task.workspace_files():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.copytree(entry, workspace / entry.name, symlinks=True)
                else:
                    shutil.copy2(entry, workspace / entry.name, follow_symlinks=False)
            for directory in (job.agent_dir, job.verifier_dir):
                safefs.makedirs(directory, within=job.trial_dir)
        except OSError as exc:
            raise SandboxError(f"local sandbox: cannot prepare the workspace: {exc}") from exc
        return workspace

    def _started(self, key: str, pgid: int) -> None:
        self._active[key] = pgid

    @property
    def _isolated(self) -> bool:
        return self.config.network == "proxy"

    def _hidden(self, job: SandboxJob) -> tuple[list[Path], list[Path]]:
        """(covered before the runtime is exposed, covered after): a hidden directory that holds the
        agent's runtime (a home holding the checkout) goes first, so the runtime stays visible in it."""
        runtime = runtime_paths()
        hidden = [*job.private_paths, *self.config.hide_paths, self.work_dir]
        first = [p for p in hidden if any(r != p and r.is_relative_to(p) for r in runtime)]
        return first, [p for p in hidden if p not in first]

    async def _agent(self, job: SandboxJob, workspace: Path) -> PhaseOutcome:
        binds = [Bind(workspace, APP, writable=True), Bind(job.agent_dir, LOGS_AGENT, writable=True)]
        if job.mount_solution:
            if job.task.solution_dir is None:
                raise SandboxError(f"task {job.task.name} has no solution/solve.sh to mount")
            binds.append(Bind(job.task.solution_dir, SOLUTION))
        command, env, bridges = job.agent_command, job.agent_env, []
        sockets = Path(tempfile.mkdtemp(prefix="rls-net-")) if self._isolated else None
        try:
            if sockets is not None:
                command, env, bridges = await _bridge(job, sockets)
                binds.append(Bind(sockets, NET_DIR))
            outcome = await self._phase(job, "agent", binds, command, env, job.agent_timeout_sec,
                                        stdout=job.agent_dir / AGENT_STDOUT, stderr=job.agent_dir / AGENT_STDERR)
        finally:
            for bridge in bridges:
                await bridge.close()
            if sockets is not None:
                shutil.rmtree(sockets, ignore_errors=True)
        safefs.write_text(job.agent_dir / AGENT_EXIT_CODE, f"{outcome.exit_code}\n", within=job.trial_dir)
        return outcome

    async def _verifier(self, job: SandboxJob, workspace: Path) -> PhaseOutcome:
        # A reward file must come from this verifier run, never from the agent or an earlier run.
        safefs.clear_dir(job.verifier_dir, within=job.trial_dir)
        binds = [Bind(workspace, APP, writable=True), Bind(job.agent_dir, LOGS_AGENT),
                 Bind(job.verifier_dir, LOGS_VERIFIER, writable=True), Bind(job.task.tests_dir, TESTS)]
        return await self._phase(job, "verifier", binds, ["bash", TEST_SCRIPT], job.task.config.verifier.env,
                                 job.verifier_timeout_sec, stdout=job.verifier_dir / VERIFIER_OUTPUT, stderr=None)

    async def _phase(self, job: SandboxJob, phase: str, binds: list[Bind], command: list[str], env: dict[str, str],
                     timeout: float, *, stdout: Path, stderr: Path | None) -> PhaseOutcome:
        key = f"{job.run}/{job.trial}/{phase}"
        pipe = StatusPipe()
        started_at = datetime.now(UTC)
        try:
            first, hide = self._hidden(job)
            argv = bwrap_argv(self.config.bwrap, binds=binds, hide=hide, hide_first=first, command=command, chdir=APP,
                              status_fd=pipe.write_fd, expose=runtime_paths(), unshare_net=self._isolated)
            sandbox_env = {"PATH": self.config.path, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", **env}
            try:
                done = await run_group(argv, env=sandbox_env, stdout=stdout, stderr=stderr, timeout=timeout,
                                       kill_grace=self.config.kill_grace_sec, pass_fds=(pipe.write_fd,),
                                       on_start=lambda pgid: self._started(key, pgid), within=job.trial_dir)
            except OSError as exc:
                raise SandboxError(f"local sandbox: cannot start {phase}: {exc}") from exc
            finally:
                self._active.pop(key, None)
        finally:
            status = pipe.finish()
        finished_at = datetime.now(UTC)
        if "child-pid" not in status and not done.timed_out:
            detail = safefs.tail(stderr or stdout, job.trial_dir)
            raise SandboxError(f"local sandbox: bwrap failed to set up the {phase} sandbox: {detail}")
        exit_code = status.get("exit-code", done.returncode) if not done.timed_out else done.returncode
        return PhaseOutcome(started_at=started_at, finished_at=finished_at, exit_code=exit_code,
                            timed_out=done.timed_out)


async def _bridge(job: SandboxJob, sockets: Path) -> tuple[list[str], dict[str, str], list[HostBridge]]:
    """One host socket per address the agent's ``*_BASE_URL`` names (the proxy), the agent command
    wrapped in the in-sandbox forwarder, and the URLs pointed at the sandbox's own 127.0.0.1."""
    env, ports = inside_addresses(job.agent_env)
    bridges, forwards = [], []
    for target, inside in ports.items():
        path = sockets / f"{inside}.sock"
        bridge = HostBridge(str(path), *target)
        await bridge.start()
        bridges.append(bridge)
        forwards += ["--forward", f"{inside}={NET_DIR}/{path.name}"]
    if not bridges:
        return job.agent_command, env, bridges
    return [sys.executable, "-I", str(BRIDGE), *forwards, "--", *job.agent_command], env, bridges
