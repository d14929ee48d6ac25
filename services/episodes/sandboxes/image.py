"""The ``local`` backend in a task's image: each trial a container of the task's own filesystem.

Per trial: the task's image (``TaskImages``: from the lock file or built; its layers as podman's
store keeps them, or unpacked once per digest) under an upper directory of the trial's own
(``layers``), then the agent and the
verifier, each a bubblewrap sandbox rooted at that overlay:

- agent: the image's tree at ``/`` (its WORKDIR as the working directory, its ENV), the trial's
  ``agent/`` at /logs/agent, the agent bundle read-only at /opt/rlstack (runtimes and CLIs from
  outside the image: ``rlstack.episodes.bundle``), /solution for the oracle; its own network
  namespace whose one way out, to the proxy, is opened from outside (``netns.ProxyDoor``);
- verifier, after every process of the agent is gone: the same overlay (what the agent changed
  anywhere is what it sees), /tests, /logs/verifier; no network unless the task allows internet
  and the operator does too (``verifier_internet``).

Each phase runs in cgroups with the task's cpus and memory_mb (``cgroups``). Nothing of this
module runs inside the image: an image with nothing but ``/bin/sh`` and the verifier's tools works.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path

from rlstack.common import safefs
from rlstack.episodes.bundle.manifest import BundleManifest, load_manifest
from rlstack.episodes.bundle.paths import BUNDLE_MOUNT
from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.sandboxes.base import (
    AGENT_EXIT_CODE,
    AGENT_STDERR,
    AGENT_STDOUT,
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
from rlstack.episodes.sandboxes.bwrap import Bind, StatusPipe
from rlstack.episodes.sandboxes.cgroups import CgroupError, Limits, TrialCgroup
from rlstack.episodes.sandboxes.config import LocalSandboxConfig
from rlstack.episodes.sandboxes.layers import TrialLayers, image_bwrap_argv, launcher_argv
from rlstack.episodes.sandboxes.netns import ProxyDoor
from rlstack.episodes.sandboxes.procgroup import kill_group, run_group
from rlstack.episodes.sandboxes.proxy_urls import inside_addresses

log = logging.getLogger(__name__)

class ImageSandbox:
    """``LocalSandboxConfig(environment="image")``: trials in their tasks' images on this host."""

    kind = "local"

    def __init__(self, config: LocalSandboxConfig, images=None) -> None:  # noqa: ANN001 - a TaskImages or alike
        self.config = config
        if images is None:
            from rlstack.episodes.images.resolve import TaskImages

            images = TaskImages(config.images, lock_path=config.image_lock, build_missing=config.build_missing)
        self.images = images
        self.work_dir = config.work_dir or Path("/tmp/rlstack-sandboxes")  # noqa: S108 - the host's, not the agent's
        self._active: dict[str, int] = {}
        self._checked = False
        self._tools: dict[str, str] = {}
        self._probed: dict[tuple[str, str], str | None] = {}  # (image id, agent) -> why it cannot run there (None: fine)
        self.manifest: BundleManifest | None = None
        self._probe_lock = threading.Lock()
        self._probe_locks: dict[tuple[str, str], threading.Lock] = {}

    def active(self) -> dict[str, int]:
        return dict(self._active)

    def check(self) -> None:
        """bubblewrap, unshare and mount on this host, root (overlay mounts, entering a sandbox's
        network namespace), and the agent bundle built."""
        if self._checked:
            return
        for tool in (self.config.bwrap, "unshare", "mount"):
            found = shutil.which(tool)
            if found is None:
                raise SandboxUnavailable(f"local image sandbox: {tool!r} not found (bubblewrap: apt-get install bubblewrap; "
                                         "unshare and mount: util-linux)")
            self._tools[tool] = found
        if os.geteuid() != 0:
            raise SandboxUnavailable("local image sandbox: needs root (overlay mounts of the task's image, the proxy's door "
                                     "into each sandbox's network namespace); run the env server as root, or choose "
                                     "environment: host for tasks without an image (docs/agent-trials.md)")
        try:
            self.manifest = load_manifest(self.config.bundle_dir)
        except (OSError, ValueError) as exc:
            raise SandboxUnavailable(f"local image sandbox: no agent bundle at {self.config.bundle_dir} ({exc}): "
                                     "`make setup-agent-bundle` builds it; agents run in task images from it") from None
        self._checked = True

    def prepare(self, tasks: list[HarborTask], agent_command: list[str] | None = None) -> dict[str, str]:
        """Every task's image had (from the lock file or built, ``images.jobs`` at once) and probed,
        with the agent's program from the bundle when it has one, before the first trial; returns
        task name -> why it cannot run (empty: all can)."""
        self.check()
        failed: dict[str, str] = {}
        done = 0
        with ThreadPoolExecutor(max_workers=self.config.images.jobs) as pool:
            futures = {pool.submit(self._image_for, task, agent_command): task for task in tasks}
            for future in as_completed(futures):
                done += 1
                task = futures[future]
                try:
                    image = future.result()
                    log.info("task images: %d/%d ready (%s: %s)", done, len(tasks), task.name, image.ref)
                except SandboxError as exc:
                    failed[task.name] = str(exc)
                    log.error("task images: %d/%d, %s has none: %s", done, len(tasks), task.name, exc)
        return failed

    def _image_for(self, task: HarborTask, agent_command: list[str] | None):  # noqa: ANN202 - images.resolve.TaskImage
        try:
            image = self.images.rootfs(task)
        except Exception as exc:  # an image that cannot be had is the environment's fault, never a reward
            raise SandboxError(f"task {task.name}: no image to run in: {exc}") from exc
        agent = self._bundled(agent_command)
        key = (image.image_id, agent[0] if agent else "")
        with self._probe_lock:  # one probe per image and agent; probes of different images run at once
            lock = self._probe_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._probed:
                self._probed[key] = self._probe(image, agent)
        if (why := self._probed[key]) is not None:
            raise SandboxError(f"task {task.name}: its image {image.ref} cannot run a trial: {why}")
        return image

    def _bundled(self, command: list[str] | None) -> tuple[str, list[str], list[str]] | None:
        """(name, the programs it needs from the image, its version command) of a bundle agent the
        command runs, directly or as a launcher's argument; None for anything else (oracle, nop, commands)."""
        if not command or self.manifest is None:
            return None
        for name, entry in self.manifest.agents.items():
            if entry.program in command:
                return name, list(entry.image_programs), list(entry.version_argv)
        return None

    async def run(self, job: SandboxJob) -> SandboxOutcome:
        await asyncio.to_thread(self.check)
        image = await asyncio.to_thread(self._image_for, job.task, job.agent_image_command or job.agent_command)
        layers = await asyncio.to_thread(self._prepare, job, image.identity[0])
        try:
            agent = await self._agent(job, image, layers)
            verifier = await self._verifier(job, image, layers)
            return SandboxOutcome(agent=agent, verifier=verifier, image=image.ref,
                                  agent_argv="image_command" if job.agent_image_command else "command")
        finally:
            if not self.config.keep_workspaces:
                await asyncio.to_thread(layers.remove)

    async def close(self) -> None:
        for pgid in self._active.values():
            kill_group(pgid)
        self._active.clear()

    def _probe(self, image, agent: tuple[str, list[str], list[str]] | None) -> str | None:  # noqa: ANN001 - a TaskImage
        """Once per image and agent, before the first trial: the image's ``/bin/sh`` runs in a sandbox
        like a trial's (an image without one, or built for another architecture, is refused here, not
        trial by trial), then what the agent needs of the image, then the agent's own program from
        the bundle (its version), so an agent that cannot run in the image is known before it is asked to."""
        layers = TrialLayers.make(self.work_dir, "probe-")
        status = StatusPipe()
        script = "exit 0"
        if agent is not None:
            name, needs, version = agent
            checks = "".join(f'{{ {" || ".join(f"command -v {p} >/dev/null" for p in need.split("|"))}; }} || '
                             f'{{ echo "the {name} agent needs {need} in the image, which has none" >&2; exit 3; }}; '
                             for need in needs)
            script = checks + 'exec "$@" >/dev/null'
        try:
            argv = launcher_argv(unshare=self._tools["unshare"], mount=self._tools["mount"], lowers=image.lowers, layers=layers,
                                 sandbox=image_bwrap_argv(self._tools[self.config.bwrap], root=layers.merged,
                                                          binds=[Bind(self.config.bundle_dir, BUNDLE_MOUNT)],
                                                          command=["/bin/sh", "-c", script, "probe", *(agent[2] if agent else [])],
                                                          chdir="/", status_fd=status.write_fd, block_fd=None, unshare_net=True))
            done = subprocess.run(argv, env={"PATH": self.config.path}, capture_output=True, timeout=60,
                                  pass_fds=(status.write_fd,))
            result = status.finish()
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the probe did not run: {exc}"
        finally:
            status.finish()
            layers.remove()
        if done.returncode == 0 and result.get("exit-code") == 0:
            return None
        said = done.stderr.decode(errors="replace").strip()[-500:]
        if "child-pid" not in result:
            return f"its layers could not be mounted: {said}"
        if "Exec format error" in said:
            return f"its /bin/sh is for another architecture than this host's: {said}"
        if "execvp /bin/sh" in said:
            return f"no working /bin/sh in it (every trial phase runs through it): {said}"
        return said or f"its probe ended {result}"

    def _prepare(self, job: SandboxJob, uid: int) -> TrialLayers:
        try:
            for directory in (job.agent_dir, job.verifier_dir):
                safefs.makedirs(directory, within=job.trial_dir)
                if uid != 0:  # the image's own user writes its logs there
                    os.chmod(directory, 0o777)  # noqa: S103
            return TrialLayers.make(self.work_dir, f"{job.run}-{job.trial}-")
        except OSError as exc:
            raise SandboxError(f"local image sandbox: cannot prepare the trial's layers: {exc}") from exc

    async def _agent(self, job: SandboxJob, image, layers: TrialLayers) -> PhaseOutcome:  # noqa: ANN001
        binds = [Bind(job.agent_dir, LOGS_AGENT, writable=True), Bind(self.config.bundle_dir, BUNDLE_MOUNT)]
        if job.mount_solution:
            if job.task.solution_dir is None:
                raise SandboxError(f"task {job.task.name} has no solution/solve.sh to mount")
            binds.append(Bind(job.task.solution_dir, SOLUTION))
        env, doors = _doors(job.agent_env)
        command = job.agent_image_command or job.agent_command
        outcome = await self._phase(job, "agent", image, layers, binds, command, env, job.agent_timeout_sec,
                                    stdout=job.agent_dir / AGENT_STDOUT, stderr=job.agent_dir / AGENT_STDERR,
                                    doors=doors, unshare_net=True)
        safefs.write_text(job.agent_dir / AGENT_EXIT_CODE, f"{outcome.exit_code}\n", within=job.trial_dir)
        return outcome

    async def _verifier(self, job: SandboxJob, image, layers: TrialLayers) -> PhaseOutcome:  # noqa: ANN001
        safefs.clear_dir(job.verifier_dir, within=job.trial_dir)
        binds = [Bind(job.agent_dir, LOGS_AGENT), Bind(job.verifier_dir, LOGS_VERIFIER, writable=True),
                 Bind(job.task.tests_dir, TESTS)]
        if image.identity[0] != 0:  # its switch to the image's user comes from the bundle
            binds.append(Bind(self.config.bundle_dir, BUNDLE_MOUNT))
        online = bool(job.task.config.environment.allow_internet) and self.config.verifier_internet
        return await self._phase(job, "verifier", image, layers, binds, ["bash", TEST_SCRIPT], job.task.config.verifier.env, job.verifier_timeout_sec,
                                 stdout=job.verifier_dir / VERIFIER_OUTPUT, stderr=None, doors=[], unshare_net=not online)

    def _limits(self, job: SandboxJob) -> Limits:
        env = job.task.config.environment
        return Limits(cpus=env.cpus, memory_mb=env.memory_mb)

    async def _phase(self, job: SandboxJob, phase: str, image, layers: TrialLayers, binds: list[Bind],  # noqa: ANN001
                     command: list[str], env: dict[str, str], timeout: float, *, stdout: Path, stderr: Path | None,
                     doors: list[ProxyDoor], unshare_net: bool) -> PhaseOutcome:
        key = f"{job.run}/{job.trial}/{phase}"
        cgroup = TrialCgroup(f"{job.run}-{job.trial}-{phase}", self._limits(job))
        if not cgroup.limits.empty and self.config.limits == "enforce":
            try:
                await asyncio.to_thread(cgroup.create)
            except CgroupError as exc:
                raise SandboxError(f"local image sandbox: task {job.task.name}: {exc}") from exc
        status = StatusPipe()
        block_read, block_write = os.pipe() if doors else (-1, -1)
        sandbox_env = {**image.config.env, "HOME": image.config.env.get("HOME", image.home), **env, **cgroup.env()}
        sandbox_env.setdefault("PATH", self.config.path)
        argv = launcher_argv(
            unshare=self._tools["unshare"], mount=self._tools["mount"], lowers=image.lowers, layers=layers,
            sandbox=image_bwrap_argv(self._tools[self.config.bwrap], root=layers.merged, binds=binds, command=command,
                                     chdir=image.config.working_dir or "/", status_fd=status.write_fd,
                                     block_fd=block_read if doors else None, unshare_net=unshare_net,
                                     identity=image.identity))
        failure: list[BaseException] = []

        async def open_doors(pgid: int) -> None:
            try:
                pid = await status.child_pid()
                for door in doors:
                    await door.open(pid)
                os.write(block_write, b"go")
            except Exception as exc:  # noqa: BLE001 - recorded, the sandbox is killed, the trial is an infra error
                failure.append(exc)
                kill_group(pgid)

        opener: asyncio.Task | None = None

        def started(pgid: int) -> None:
            nonlocal opener
            self._active[key] = pgid
            if doors:
                opener = asyncio.ensure_future(open_doors(pgid))

        started_at = datetime.now(UTC)
        try:
            pass_fds = (status.write_fd, block_read) if doors else (status.write_fd,)
            try:
                done = await run_group(argv, env=sandbox_env, stdout=stdout, stderr=stderr, timeout=timeout,
                                       kill_grace=self.config.kill_grace_sec, pass_fds=pass_fds, on_start=started,
                                       within=job.trial_dir)
            except OSError as exc:
                raise SandboxError(f"local image sandbox: cannot start {phase}: {exc}") from exc
            finally:
                self._active.pop(key, None)
                if opener is not None:
                    opener.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await opener
            result = status.finish()
        finally:
            status.finish()
            for fd in (block_read, block_write):
                if fd >= 0:
                    os.close(fd)
            for door in doors:
                await door.close()
            oom = cgroup.oom_killed()
            await asyncio.to_thread(cgroup.remove)
        if failure:
            raise SandboxError(f"local image sandbox: the proxy's door into the {phase} sandbox: {failure[0]}")
        if "child-pid" not in result and not done.timed_out:
            detail = safefs.tail(stderr or stdout, job.trial_dir)
            raise SandboxError(f"local image sandbox: cannot set up the {phase} sandbox in {image.ref}: {detail}")
        exit_code = result.get("exit-code", done.returncode) if not done.timed_out else done.returncode
        if oom:
            log.info("trial %s/%s: %s passed its memory limit (%s MB) and was killed", job.run, job.trial, phase,
                     cgroup.limits.memory_mb)
        return PhaseOutcome(started_at=started_at, finished_at=datetime.now(UTC), exit_code=exit_code,
                            timed_out=done.timed_out)


def _doors(agent_env: dict[str, str]) -> tuple[dict[str, str], list[ProxyDoor]]:
    """One door per address the agent's ``*_BASE_URL`` names (the proxy), and the URLs pointed inside."""
    env, ports = inside_addresses(agent_env)
    return env, [ProxyDoor(inside, *target) for target, inside in ports.items()]
