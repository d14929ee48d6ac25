"""The ``kubernetes`` backend: one run-to-completion pod per trial, through ``SandboxManager``.

The pod runs three containers in order over one ``emptyDir`` workspace at ``/app``: init
``workspace`` copies the task's environment files in, init ``agent`` runs the agent, and the
main ``verifier`` runs ``/tests/test.sh``. The agent container never mounts the tests or other
trials: it sees only ``/app``, its own ``/logs/agent`` and ``/tmp``. Each phase runs under
``rlstack.episodes.sandboxes.phase`` (timeout, process group, ``phase.json``), which writes into the
trial's directory on the shared trials volume (``subPath`` mounts of the chart's RWX claim),
so outcomes, logs and the reward come back without exec websockets or pod logs.

The pod's labels (``harbor-run``, ``harbor-trial``), owner reference, missing service-account
token, deadline and the TTL reaper are the manager's; resources come from ``task.toml``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from pathlib import Path

from rlstack.episodes.sandboxes import safefs
from rlstack.episodes.sandboxes.base import (
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
from rlstack.episodes.sandboxes.config import KubernetesSandboxConfig
from rlstack.episodes.sandboxes.phase import OUTCOME_FILE

log = logging.getLogger(__name__)
STAGE = ".sandbox"
"""Inside the trial directory: the task's files for the pod (workspace seed, tests, solution)."""


class KubernetesSandbox:
    kind = "kubernetes"

    def __init__(self, manager, config: KubernetesSandboxConfig) -> None:  # noqa: ANN001 - SandboxManager (lightkube)
        self.manager = manager
        self.config = config
        self._running: set[str] = set()

    def check(self) -> None:
        if not self.config.trials_dir.is_dir():
            raise SandboxUnavailable(f"kubernetes sandbox: trials dir {self.config.trials_dir} is not mounted here")

    async def run(self, job: SandboxJob) -> SandboxOutcome:
        from rlstack.episodes.sandboxes.pods import SandboxGone

        trial_dir = job.agent_dir.parent
        await asyncio.to_thread(self._stage, job, trial_dir)
        name = None
        try:
            name = await self.manager.launch(self.spec(job, trial_dir))
            self._running.add(name)
            deadline = self._deadline(job)
            try:
                pod = await self.manager.wait(name, timeout=deadline + 60)
            except SandboxGone:
                raise SandboxError(f"kubernetes sandbox: pod {name} was deleted before the trial finished") from None
            except TimeoutError:
                raise SandboxError(f"kubernetes sandbox: pod {name} did not finish within {deadline + 60}s") from None
            agent = _outcome(job.agent_dir, trial_dir)
            verifier = _outcome(job.verifier_dir, trial_dir)
            if agent is None or verifier is None:
                raise SandboxError(f"kubernetes sandbox: pod {name} ended {pod.phase} ({pod.reason or 'no reason'}) "
                                   f"before {'the agent' if agent is None else 'the verifier'} finished")
            return SandboxOutcome(agent=agent, verifier=verifier)
        finally:
            if name is not None:
                self._running.discard(name)
                if not self.config.keep_pods:
                    with contextlib.suppress(Exception):  # the reaper gets any pod we could not delete
                        await asyncio.shield(self.manager.delete(name))
            await asyncio.to_thread(shutil.rmtree, trial_dir / STAGE, True)

    async def close(self) -> None:
        for name in list(self._running):
            with contextlib.suppress(Exception):
                await self.manager.delete(name)
        self._running.clear()

    def _deadline(self, job: SandboxJob) -> int:
        return int(job.agent_timeout_sec + job.verifier_timeout_sec) + self.config.deadline_slack_sec

    def _stage(self, job: SandboxJob, trial_dir: Path) -> None:
        """The task's files into the trial directory, where the pod's init containers find them."""
        stage = trial_dir / STAGE
        try:
            shutil.rmtree(stage, ignore_errors=True)
            (stage / "workspace").mkdir(parents=True)
            for entry in job.task.workspace_files():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.copytree(entry, stage / "workspace" / entry.name, symlinks=True)
                else:
                    shutil.copy2(entry, stage / "workspace" / entry.name, follow_symlinks=False)
            shutil.copytree(job.task.tests_dir, stage / "tests")
            if job.mount_solution:
                if job.task.solution_dir is None:
                    raise SandboxError(f"task {job.task.name} has no solution/solve.sh to mount")
                shutil.copytree(job.task.solution_dir, stage / "solution")
            safefs.makedirs(job.agent_dir, within=trial_dir)
            safefs.clear_dir(job.verifier_dir, within=trial_dir)  # a reward can only come from this pod's verifier
            safefs.unlink(job.agent_dir / OUTCOME_FILE, within=trial_dir)
        except OSError as exc:
            raise SandboxError(f"kubernetes sandbox: cannot stage the task on the trials volume: {exc}") from exc

    def spec(self, job: SandboxJob, trial_dir: Path):  # noqa: ANN201 - rlstack.episodes.sandboxes.pods.SandboxSpec
        from rlstack.episodes.sandboxes.pods import SandboxSpec

        c = self.config
        base = f"{c.trials_subpath.strip('/')}/{trial_dir.relative_to(c.trials_dir).as_posix()}"

        def mount(path: str, sub: str | None = None, read_only: bool = False, volume: str = "trials") -> dict:
            m: dict = {"name": volume, "mountPath": path}
            if sub is not None:
                m["subPath"] = f"{base}/{sub}"
            return {**m, "readOnly": True} if read_only else m

        def phase(out: str, timeout: float, stdout: str, stderr: str | None, command: list[str], *extra: str) -> list[str]:
            argv = [c.python, "-m", "rlstack.episodes.sandboxes.phase", "--out-dir", out, "--timeout", f"{timeout:g}",
                    "--kill-grace", f"{c.kill_grace_sec:g}", "--stdout", stdout]
            return [*argv, *(["--stderr", stderr] if stderr else []), *extra, "--", *command]

        app, tmp = mount(APP, volume="app"), mount("/tmp", volume="tmp")
        agent_mounts = [app, tmp, mount(LOGS_AGENT, "agent")]
        if job.mount_solution:
            agent_mounts.append(mount(SOLUTION, f"{STAGE}/solution", read_only=True))
        home = {"HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
        env = lambda values: [{"name": k, "value": v} for k, v in sorted({**home, **values}.items())]  # noqa: E731
        resources = job.task.config.environment
        return SandboxSpec(
            trial=job.trial, image=c.image, run_as_user=c.run_as_user, deadline_seconds=self._deadline(job),
            cpu=str(resources.cpus or 1), memory=f"{resources.memory_mb}Mi" if resources.memory_mb else "2Gi",
            container_name="verifier", working_dir=APP,
            command=phase(LOGS_VERIFIER, job.verifier_timeout_sec, VERIFIER_OUTPUT, None, ["bash", TEST_SCRIPT]),
            env={**home, **job.task.config.verifier.env},
            volumes=[{"name": "trials", "persistentVolumeClaim": {"claimName": c.claim_name}},
                     {"name": "app", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
            volume_mounts=[app, tmp, mount(LOGS_AGENT, "agent", read_only=True), mount(LOGS_VERIFIER, "verifier"),
                           mount(TESTS, f"{STAGE}/tests", read_only=True)],
            init_containers=[
                # Entry by entry: `cp -a /seed/. /app/` also sets /app's own times, which a non-root
                # user may not do on the kubelet's root-owned emptyDir (EPERM, exit 1).
                {"name": "workspace", "image": c.image,
                 "command": ["find", "/seed", "-mindepth", "1", "-maxdepth", "1", "-exec", "cp", "-a", "{}", f"{APP}/", ";"],
                 "volumeMounts": [app, mount("/seed", f"{STAGE}/workspace", read_only=True)]},
                {"name": "agent", "image": c.image, "workingDir": APP, "env": env(job.agent_env),
                 "command": phase(LOGS_AGENT, job.agent_timeout_sec, AGENT_STDOUT, AGENT_STDERR, job.agent_command,
                                  "--exit-code-file"),
                 "volumeMounts": agent_mounts},
            ])


def _outcome(directory: Path, trial_dir: Path) -> PhaseOutcome | None:
    """``phase.json`` as the pod left it: read without following a symlink (the agent container can
    write its own log directory) and capped in size."""
    try:
        return PhaseOutcome.model_validate_json(safefs.read_bytes(directory / OUTCOME_FILE, trial_dir, limit=64 * 1024))
    except (OSError, ValueError):
        return None
