"""The ``kubernetes`` backend: one run-to-completion pod per trial, through ``SandboxManager``.

``environment: image`` (the default): the pod's one main container runs the task's own image
(from the lock file, by digest once pushed), and both phases in it, so what the agent changes
anywhere is what the verifier sees. An init container first copies the agent bundle (its core and
the trial's agent) from the bundle image into an ``emptyDir`` mounted read-only at
``/opt/rlstack``, or an image volume mounts it there. The main container's first process is the
bundle's ``rlstack.episodes.inside.trial`` (PID 1): it takes the staged tests into memory and
deletes them before the agent starts, runs the agent, kills every process left, and only then
writes ``/tests`` and runs the verifier. The pod runs as the image's user (``restricted``), or, for
an image that runs as root, as root with the baseline capabilities only.

``environment: host``: three containers in order over one ``emptyDir`` workspace at ``/app``, all
in one image (the chart's trainer image): init ``workspace`` copies the task's environment files
in, init ``agent`` runs the agent, and the main ``verifier`` runs ``/tests/test.sh``; each phase
under ``rlstack.episodes.sandboxes.phase``. For tasks that declare no image.

Either way every outcome, log and the reward land in the trial's directory on the shared trials
volume (``subPath`` mounts of the chart's RWX claim), with no exec websockets or pod logs.

The pod's labels (``harbor-run``, ``harbor-trial``), owner reference, missing service-account
token, deadline and the TTL reaper are the manager's; resources come from ``task.toml``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from prometheus_client import CollectorRegistry

from rlstack.common import safefs
from rlstack.episodes.bundle.paths import AGENT_PROGRAMS, BUNDLE_MOUNT, PYTHON
from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.lock import ImageLockError, LockEntry
from rlstack.episodes.inside.plan import PLAN, PhasePlan, TrialPlan
from rlstack.episodes.inside.trial import CLAIM
from rlstack.episodes.sandboxes.api_calls import ApiCalls
from rlstack.episodes.sandboxes.base import (
    AGENT_STDERR,
    AGENT_STDOUT,
    APP,
    LOGS_AGENT,
    LOGS_VERIFIER,
    SOLUTION,
    STAGE,
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
from rlstack.episodes.sandboxes.locked_images import LockedImages
from rlstack.episodes.sandboxes.phase import OUTCOME_FILE
from rlstack.episodes.sandboxes.pool import (
    MAIN_CONTAINER,
    POOL_DIR,
    POOL_LABEL,
    PoolKey,
    PoolMetrics,
    WarmPool,
)

log = logging.getLogger(__name__)
POD_STAGE = "/run/rlstack-trial"
"""Where an image-mode pod mounts the stage (``rlstack.episodes.inside.trial.STAGE``)."""
BUNDLE_COPY = "/bundle"
POOL_RETRY_SECONDS = 30


class KubernetesSandbox:
    kind = "kubernetes"

    def __init__(self, manager, config: KubernetesSandboxConfig, registry: CollectorRegistry | None = None) -> None:  # noqa: ANN001
        self.manager = manager  # SandboxManager (lightkube)
        self.config = config
        self.images = LockedImages(config.image_lock)
        self.metrics = PoolMetrics(registry)
        if registry is not None:  # the manager's requests counted on the env server's /metrics
            manager.api = ApiCalls(manager.api.settings, registry)
        self._running: set[str] = set()
        self.watch = None
        """The run's pods, one list and one watch for every trial (``pod_watch.RunPodWatch``), from the first trial."""
        self.pool: WarmPool | None = None
        self._started: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool_retry_at = 0.0
        self._agents: tuple[str, ...] = ()

    @property
    def start_allowance_seconds(self) -> float:
        """How long a trial's pod may take to reach its agent (scheduling, image pulls, a busy node's
        init containers): its deadline's slack. The trial's key must outlive it (seen on the real node,
        128 cold pods at once: keys minted with the agent's time alone expired before the first call)."""
        return float(self.config.deadline_slack_sec)

    async def _start(self) -> None:
        """The shared watch and the pool, on the first trial's event loop, once. The sandbox serves
        that loop only: its API client's connections, its watch and its pool's tasks live on it."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise SandboxError("kubernetes sandbox: it serves the event loop it first ran on (its API client, pod watch and "
                               "pool live there); run every trial of it under one loop (one asyncio.run or asyncio.Runner)")
        if self._started is None:
            self._started = asyncio.Lock()
        async with self._started:
            if self.watch is None:
                from rlstack.episodes.sandboxes.pod_watch import RunPodWatch

                watch = RunPodWatch(self.manager.client, self.manager.namespace, {self.manager.run_label: self.manager.run},
                                    api_calls=self.manager.api)
                await watch.start()
                self.watch = watch
            wanted = self.config.pool.enabled and self.config.environment == "image"
            if wanted and self.pool is None and loop.time() >= self._pool_retry_at:
                pool = WarmPool(self.manager, self.watch, self.config.pool, self._warm_spec, self._pool_dir, self.metrics)
                try:
                    await pool.start()
                except Exception as exc:  # trials start cold meanwhile; tried again in a while
                    self._pool_retry_at = loop.time() + POOL_RETRY_SECONDS
                    log.warning("warm pool: could not start (%r); trials start cold, trying again in %ds", exc, POOL_RETRY_SECONDS)
                    return
                self.pool = pool

    async def expect(self, tasks: list[HarborTask], trials_each: int) -> None:
        """The tasks of the next groups, ``trials_each`` trials each: what the warm pool keeps ready."""
        if not self.config.pool.enabled or self.config.environment != "image":
            return
        await self._start()
        demand: Counter[PoolKey] = Counter()
        for task in tasks:
            with contextlib.suppress(SandboxError):
                image = self._image(task)
                if image is not None:
                    demand[self._key(task, image, self._agents)] += trials_each
        if self.pool is not None:
            self.pool.expect(demand)

    def _pool_dir(self, name: str) -> Path:
        return self.config.trials_dir / POOL_DIR / self.manager.run / name

    def check(self) -> None:
        if not self.config.trials_dir.is_dir():
            raise SandboxUnavailable(f"kubernetes sandbox: trials dir {self.config.trials_dir} is not mounted here")

    def prepare(self, tasks: list[HarborTask], agent_command: list[str] | None = None) -> dict[str, str]:
        """Every task's image from the lock file before the first trial; task name -> why it has none."""
        if self.config.environment != "image":
            return {}
        self._agents = _agents_of(agent_command or [])
        failed, refs = {}, set()
        for task in tasks:
            try:
                refs.add(self._image(task).pull_ref)
            except SandboxError as exc:
                failed[task.name] = str(exc)
        log.info("task images: %d of %d tasks have one in the lock file (%d distinct images; bundle %s, %s)",
                 len(tasks) - len(failed), len(tasks), len(refs), self.config.bundle_image, self.config.bundle_source)
        return failed

    def _image(self, task: HarborTask) -> LockEntry | None:
        if self.config.environment != "image":
            return None
        try:
            entry = self.images.entry(task)
        except ImageLockError as exc:
            raise SandboxError(f"task {task.name}: no image to run in: {exc}") from None
        if entry.runs_as_root and self.manager.pod_security.level == "restricted":
            raise SandboxError(f"task {task.name}: its image {entry.ref} runs as root, which Pod Security restricted "
                               "refuses: give the image a non-root USER, or allow baseline (the chart's "
                               "sandboxes.podSecurity=baseline, RLSTACK_SANDBOX_POD_LEVEL) and consider "
                               "sandboxes.pod.runtimeClassName (gvisor, kata) for root tasks")
        return entry

    async def run(self, job: SandboxJob) -> SandboxOutcome:
        began = datetime.now(UTC)
        await self._start()
        image = self._image(job.task)
        self.metrics.in_flight.inc()
        try:
            if self.pool is not None and image is not None and self._deadline(job) <= self.config.pool.trial_seconds:
                key = self._pool_key(job, image)
                for _ in range(2):  # a claimed pod found gone before its agent started: once more, then cold
                    warm = self.pool.claim(key)
                    if warm is None:
                        break
                    outcome = await self._run_warm(job, image, warm.name)
                    if outcome is not None:
                        return self._started_as(outcome, "warm", began)
            return self._started_as(await self._run_cold(job, image), "cold", began)
        finally:
            self.metrics.in_flight.dec()

    def _started_as(self, outcome: SandboxOutcome, start: Literal["warm", "cold"], began: datetime) -> SandboxOutcome:
        self.metrics.claims.labels(start).inc()
        self.metrics.start_seconds.labels(start).observe(max(0.0, (outcome.agent.started_at - began).total_seconds()))
        return outcome.model_copy(update={"start": start})

    async def _run_cold(self, job: SandboxJob, image: LockEntry | None) -> SandboxOutcome:
        trial_dir = job.agent_dir.parent
        await asyncio.to_thread(self._stage, job, trial_dir, image)
        name = None
        try:
            name = await self.manager.launch(self.spec(job, trial_dir, image))
            self._running.add(name)
            pod = await self._wait(name, job)
            return self._read_outcome(job, name, pod, image)
        finally:
            if name is not None:
                await self._delete(name)
            await asyncio.to_thread(shutil.rmtree, trial_dir / STAGE, True)

    async def _run_warm(self, job: SandboxJob, image: LockEntry, name: str) -> SandboxOutcome | None:
        """The trial in a claimed warm pod; None when the watch had seen the pod deleted before the
        claim was written (after that, a pod gone is the trial's infra error, as a cold pod's)."""
        trial_dir, pod_dir = job.agent_dir.parent, self._pool_dir(name)
        self._running.add(name)
        try:
            if self.watch.get(name) is None:  # deleted between the claim and now: the watch has said so
                log.info("trial %s: warm pod %s was gone before its claim; claiming another", job.trial, name)
                return None
            await asyncio.to_thread(self._stage_claim, job, trial_dir, pod_dir)
            pod = await self._wait(name, job)  # gone or timed out from here on: an infra error, as a cold pod's
            await asyncio.to_thread(self._collect, job, trial_dir, pod_dir)
            return self._read_outcome(job, name, pod, image)
        finally:
            await self._delete(name)
            await asyncio.to_thread(shutil.rmtree, pod_dir, True)

    async def _wait(self, name: str, job: SandboxJob):  # noqa: ANN202 - pods.SandboxOutcome
        from rlstack.episodes.sandboxes.pod_watch import PodGone, WatchClosed
        from rlstack.episodes.sandboxes.pods import FINISHED, outcome

        timeout = self._deadline(job) + 60
        try:
            pod = await self.watch.wait_for(name, lambda p: bool(p.status and p.status.phase in FINISHED), timeout=timeout)
        except PodGone:
            raise SandboxError(f"kubernetes sandbox: pod {name} was deleted before the trial finished") from None
        except WatchClosed:  # the env server is stopping: the trial is abandoned with it, not a bug
            raise SandboxError(f"kubernetes sandbox: stopping before pod {name} finished") from None
        except TimeoutError:
            raise SandboxError(f"kubernetes sandbox: pod {name} did not finish within {timeout}s") from None
        return outcome(pod)

    def _read_outcome(self, job: SandboxJob, name: str, pod, image: LockEntry | None) -> SandboxOutcome:  # noqa: ANN001
        trial_dir = job.agent_dir.parent
        agent = _outcome(job.agent_dir, trial_dir)
        verifier = _outcome(job.verifier_dir, trial_dir)
        if agent is None or verifier is None:
            where = f", container {pod.container} exited {pod.exit_code}" if pod.container else ""
            raise SandboxError(f"kubernetes sandbox: pod {name} ended {pod.phase} ({pod.reason or 'no reason'}{where}) "
                               f"before {'the agent' if agent is None else 'the verifier'} finished")
        return SandboxOutcome(agent=agent, verifier=verifier, image=image.recorded_ref if image else None,
                              agent_argv="image_command" if job.agent_image_command else "command")

    async def _delete(self, name: str) -> None:
        self._running.discard(name)
        if not self.config.keep_pods:
            with contextlib.suppress(Exception):  # the reaper gets any pod we could not delete
                await asyncio.shield(self.manager.delete(name))

    async def close(self) -> None:
        """Every pod of this server's deleted, all at once and beside the pool's close: a stop's grace
        (60 s) must hold a hundred trials' pods on a busy API server."""
        async def delete(name: str) -> None:
            with contextlib.suppress(Exception):
                await self.manager.delete(name)

        await asyncio.gather(self.pool.close() if self.pool is not None else asyncio.sleep(0),
                             *(delete(name) for name in list(self._running)))
        self._running.clear()
        if self.watch is not None:
            await self.watch.close()

    def _deadline(self, job: SandboxJob) -> int:
        return int(job.agent_timeout_sec + job.verifier_timeout_sec) + self.config.deadline_slack_sec

    def _stage(self, job: SandboxJob, trial_dir: Path, image: LockEntry | None) -> None:
        """The task's files into the trial directory, where the pod finds them. In a task image the
        workspace is the image's own; the pod's user may be another than this server's, so what it
        writes or deletes (its logs, the stage it empties) is open to every user."""
        stage = trial_dir / STAGE
        try:
            shutil.rmtree(stage, ignore_errors=True)
            (stage / "workspace").mkdir(parents=True)
            for entry in job.task.workspace_files() if image is None else ():
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
            if image is not None:
                safefs.write_text(stage / PLAN, self._plan(job).model_dump_json(), within=trial_dir)
                for directory in (stage, job.agent_dir, job.verifier_dir, *[p for p in stage.rglob("*") if p.is_dir()]):
                    os.chmod(directory, 0o777)  # noqa: S103 - the pod's user empties the stage and writes its logs
        except OSError as exc:
            raise SandboxError(f"kubernetes sandbox: cannot stage the task on the trials volume: {exc}") from exc

    def _stage_claim(self, job: SandboxJob, trial_dir: Path, pod_dir: Path) -> None:
        """A claim: the trial's tests, solution and plan into the warm pod's stage, then the trial's
        id into ``claim`` (there, empty, since the pod's creation), which starts the driver."""
        stage = pod_dir / STAGE
        try:
            if job.mount_solution and job.task.solution_dir is None:
                raise SandboxError(f"task {job.task.name} has no solution/solve.sh to mount")
            shutil.copytree(job.task.tests_dir, stage / "tests")
            if job.mount_solution:
                shutil.copytree(job.task.solution_dir, stage / "solution")
            safefs.makedirs(job.agent_dir, within=trial_dir)
            safefs.clear_dir(job.verifier_dir, within=trial_dir)
            safefs.unlink(job.agent_dir / OUTCOME_FILE, within=trial_dir)
            for entry in job.agent_dir.iterdir():  # the instruction, copied where the pod's /logs/agent is
                if entry.is_file() and not entry.is_symlink():
                    shutil.copyfile(entry, pod_dir / "agent" / entry.name, follow_symlinks=False)
            (stage / PLAN).write_text(self._plan(job).model_dump_json())
            for directory in [p for p in stage.rglob("*") if p.is_dir()]:
                os.chmod(directory, 0o777)  # noqa: S103 - the pod's user empties the stage
            _write_claim(stage / CLAIM, job.trial)
        except OSError as exc:
            raise SandboxError(f"kubernetes sandbox: cannot stage the claim on the trials volume: {exc}") from exc

    def _collect(self, job: SandboxJob, trial_dir: Path, pod_dir: Path) -> None:
        """What the pod wrote to its logs, moved into the trial's directory: each entry renamed as it
        is (a link stays a link, never followed; the readers below do not follow one either)."""
        try:
            for source, target in ((pod_dir / "agent", job.agent_dir), (pod_dir / "verifier", job.verifier_dir)):
                safefs.clear_dir(target, within=trial_dir)
                _move_entries(source, target)
        except OSError as exc:
            raise SandboxError(f"kubernetes sandbox: cannot collect the warm pod's logs: {exc}") from exc

    def _plan(self, job: SandboxJob) -> TrialPlan:
        return TrialPlan(
            agent=PhasePlan(argv=job.agent_image_command or job.agent_command, env=job.agent_env, timeout=job.agent_timeout_sec),
            verifier=PhasePlan(argv=["bash", TEST_SCRIPT], env=job.task.config.verifier.env, timeout=job.verifier_timeout_sec),
            kill_grace=self.config.kill_grace_sec)

    def spec(self, job: SandboxJob, trial_dir: Path, image: LockEntry | None = None):  # noqa: ANN201 - pods.SandboxSpec
        return self._host_spec(job, trial_dir) if image is None else self._image_spec(job, trial_dir, image)

    def _subpath(self, trial_dir: Path) -> str:
        c = self.config
        return f"{c.trials_subpath.strip('/')}/{trial_dir.relative_to(c.trials_dir).as_posix()}"

    def _image_spec(self, job: SandboxJob, trial_dir: Path, image: LockEntry):  # noqa: ANN202 - pods.SandboxSpec
        key = self._pool_key(job, image)
        return self._task_pod_spec(job.trial, self._subpath(trial_dir), key, self._deadline(job))

    def _warm_spec(self, key: PoolKey, pod_id: str):  # noqa: ANN202 - pods.SandboxSpec
        """A warm pod: the same pod as a trial's, its driver waiting for a claim, its directory the pool's."""
        c = self.config
        name = self.manager.pod_name(pod_id)
        base = f"{c.trials_subpath.strip('/')}/{POOL_DIR}/{self.manager.run}/{name}"
        return self._task_pod_spec(pod_id, base, key, int(c.pool.idle_seconds) + c.pool.trial_seconds,
                                   ["--wait-claim", "--idle-seconds", f"{c.pool.idle_seconds:g}"], {POOL_LABEL: key.digest})

    def _pool_key(self, job: SandboxJob, image: LockEntry) -> PoolKey:
        return self._key(job.task, image, _agents_of(job.agent_image_command or job.agent_command))

    @staticmethod
    def _key(task: HarborTask, image: LockEntry, agents: tuple[str, ...]) -> PoolKey:
        resources = task.config.environment
        return PoolKey(image=image.pull_ref, user=image.user, cpu=str(resources.cpus or 1),
                       memory=f"{resources.memory_mb}Mi" if resources.memory_mb else "2Gi", agents=agents)

    def _task_pod_spec(self, pod_trial: str, base: str, key: PoolKey, deadline: int, driver_args: list[str] | None = None,  # noqa: ANN202
                       labels: dict[str, str] | None = None):
        from rlstack.episodes.sandboxes.pods import SandboxSpec

        c, agents = self.config, list(key.agents)
        trials = lambda path, sub: {"name": "trials", "mountPath": path, "subPath": f"{base}/{sub}"}  # noqa: E731
        bundle_volume: dict = {"name": "bundle", "emptyDir": {}}
        bundle_mount = {"name": "bundle", "mountPath": BUNDLE_MOUNT, "readOnly": True}
        init = []
        if c.bundle_source == "volume":  # the image's root is the volume: the bundle is below it (subPath: 1.33+)
            bundle_volume = {"name": "bundle", "image": {"reference": c.bundle_image, "pullPolicy": c.image_pull_policy}}
            bundle_mount["subPath"] = BUNDLE_MOUNT.lstrip("/")
        else:
            init.append({"name": "bundle", "image": c.bundle_image, "imagePullPolicy": c.image_pull_policy,
                         "command": [PYTHON, "-I", "-m", "rlstack.episodes.inside.copy_bundle", BUNDLE_COPY, *agents],
                         "volumeMounts": [{"name": "bundle", "mountPath": BUNDLE_COPY}]})
        uid, gid = (int(part) for part in key.user.split(":"))
        return SandboxSpec(
            trial=pod_trial, image=key.image, image_pull_policy=c.image_pull_policy, identity=(uid, gid),
            writable_root=True, deadline_seconds=deadline, cpu=key.cpu, memory=key.memory, labels=labels or {},
            container_name=MAIN_CONTAINER, command=[PYTHON, "-I", "-m", "rlstack.episodes.inside.trial", *(driver_args or [])],
            volumes=[{"name": "trials", "persistentVolumeClaim": {"claimName": c.claim_name}}, bundle_volume,
                     {"name": "tests", "emptyDir": {}}, {"name": "solution", "emptyDir": {}}],
            volume_mounts=[bundle_mount,
                           trials(LOGS_AGENT, "agent"), trials(LOGS_VERIFIER, "verifier"), trials(POD_STAGE, STAGE),
                           {"name": "tests", "mountPath": TESTS}, {"name": "solution", "mountPath": SOLUTION}],
            init_containers=init)

    def _host_spec(self, job: SandboxJob, trial_dir: Path):  # noqa: ANN202 - pods.SandboxSpec
        from rlstack.episodes.sandboxes.pods import SandboxSpec

        c = self.config
        base = self._subpath(trial_dir)

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


def _write_claim(path: Path, trial: str) -> None:
    """The trial's id into the claim file, in place (an NFS client's open revalidates it), never
    through a link and never into anything but a regular file."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.write(fd, f"{trial}\n".encode())
    finally:
        os.close(fd)


def _move_entries(source: Path, target: Path) -> None:
    """Every entry of ``source`` renamed into ``target`` (one volume): a link moves as a link."""
    with os.scandir(source) as entries:
        for entry in entries:
            os.rename(source / entry.name, target / entry.name)


def _agents_of(command: list[str]) -> tuple[str, ...]:
    """The bundle's agents a command runs: what a pod's bundle copy must hold."""
    return tuple(name for name, program in AGENT_PROGRAMS.items() if program in command and program != PYTHON)


def _outcome(directory: Path, trial_dir: Path) -> PhaseOutcome | None:
    """``phase.json`` as the pod left it: read without following a symlink (the agent container can
    write its own log directory) and capped in size."""
    try:
        return PhaseOutcome.model_validate_json(safefs.read_bytes(directory / OUTCOME_FILE, trial_dir, limit=64 * 1024))
    except (OSError, ValueError):
        return None
