"""``python -m rlstack.episodes.inside.trial``: one trial, both phases, as PID 1 of its pod's container.

Harbor's semantics need the agent and then the verifier in one container filesystem (what the agent
changed under ``/etc`` is what the verifier sees), and a pod's containers each have their own root
filesystem, so one container runs both phases and this driver is its first process. It holds the
trial's one secret, the tests, which must not exist for the agent:

1. It refuses to run unless it is PID 1 of a PID namespace: killing "every other process" below
   is ``kill(-1)``, which outside a container would reach the host's. As init it cannot be killed
   from inside (the kernel drops SIGKILL to a namespace's init from its members) and, made
   non-dumpable, cannot be traced or read through ``/proc`` by the agent's processes (same uid,
   no capabilities).
2. It reads the staged tests (and the oracle's solution) from the trial's stage directory into
   memory and deletes them there, before the agent's first instruction.
3. Agent phase: the agent's command in its own session under its timeout (SIGTERM, grace, SIGKILL),
   output to ``/logs/agent``; then every process left in the container is killed and reaped.
4. Only then: ``/logs/verifier``, ``/tests`` and ``/solution`` emptied of anything the agent put
   there, the tests written to ``/tests``, and the verifier's phase run the same way.
5. Each phase's ``phase.json`` (a ``PhaseOutcome``) is written without following a symlink, and
   the logs are made readable and removable by the env server, whose uid may differ.

It exits 0 whatever the phases did: the env server reads the outcomes from the trials volume.

A warm-pool pod (``--wait-claim``) starts the same way before its trial is known: the driver
waits, with no agent and nothing of any trial in the pod, until the env server has written the
stage and then the trial's id, a line, into the ``claim`` file, which exists empty from the pod's
creation. It opens that file every 50 ms: an open revalidates a file an NFS client caches
(close-to-open), where a stat, or a lookup of a name not there yet, may be answered from a cache
for seconds. Unclaimed after ``--idle-seconds`` it exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rlstack.common import safefs
from rlstack.episodes.inside.plan import PLAN, PhasePlan, TrialPlan

STAGE = Path("/run/rlstack-trial")
"""The trial's stage directory on the trials volume: ``plan.json``, ``tests/``, the oracle's ``solution/``."""
LOGS_AGENT, LOGS_VERIFIER = Path("/logs/agent"), Path("/logs/verifier")
TESTS, SOLUTION = Path("/tests"), Path("/solution")
OUTCOME_FILE, EXIT_CODE_FILE = "phase.json", "exit_code.txt"
NOT_INIT = 3
PR_SET_DUMPABLE = 4
CLAIM = "claim"
"""Empty until the env server claims the pod; then the trial's id and a newline, written last."""
CLAIM_POLL_SECONDS = 0.05
"""About 0.3% of a core per idle pod (an open and a read each time); at most this much of a claim's latency."""


def log(message: str) -> None:
    print(f"inside.trial: {message}", file=sys.stderr, flush=True)


def undumpable() -> None:
    """No ptrace, no ``/proc/1/mem`` or ``/proc/1/environ`` for processes of the same uid."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def pack(directory: Path) -> bytes:
    """A directory as an in-memory tar (what the agent must not see until its phase is over)."""
    def owned_by_root(member: tarfile.TarInfo) -> tarfile.TarInfo:
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        return member

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(directory, arcname=".", filter=owned_by_root)
    return buffer.getvalue()


def unpack(data: bytes, into: Path) -> None:
    safefs.clear_dir(into, within=into)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="tar")


def sweep() -> int:
    """Kill and reap every process of the container but this one; returns how many were reaped.
    ``kill(-1)`` from a namespace's init reaches all its other members; orphans are re-parented to
    init, so ``waitpid(-1)`` sees each one die. Repeated until nothing is left to signal."""
    reaped = 0
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                reaped += 1
        except ChildProcessError:
            return reaped  # no child left, and every process here is our child or descendant
        time.sleep(0.01)


def run_phase(phase: PhasePlan, base_env: dict[str, str], grace: float, out_dir: Path, stdout: str,
              stderr: str | None) -> dict:
    started = datetime.now(UTC)
    out = os.fdopen(safefs.open_output(out_dir / stdout, out_dir), "wb")
    err = os.fdopen(safefs.open_output(out_dir / stderr, out_dir), "wb") if stderr else subprocess.STDOUT
    timed_out, code = False, None
    try:
        proc = subprocess.Popen(phase.argv, env={**base_env, **phase.env}, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
    except OSError as exc:
        out.write(f"cannot start {phase.argv[0]}: {exc}\n".encode())
        code = 127
    finally:
        out.close()
        if stderr:
            err.close()
    if code is None:
        try:
            code = proc.wait(phase.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                code = proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
    sweep()
    return {"started_at": started.isoformat(), "finished_at": datetime.now(UTC).isoformat(), "exit_code": code,
            "timed_out": timed_out}


def open_up(directory: Path) -> None:
    """Everything under ``directory`` readable and removable by anyone: the env server (another uid
    for an image that runs as root or its own user) reads the logs and later deletes the trial."""
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                mode = os.stat(path, follow_symlinks=False).st_mode
                if not stat.S_ISLNK(mode):
                    os.chmod(path, 0o777 if stat.S_ISDIR(mode) else 0o666)
            except OSError:
                continue


def wait_for_claim(stage: Path, idle_seconds: float) -> str | None:
    """The trial id once the env server claims this pod; None when nobody did within ``idle_seconds``."""
    deadline, path = time.monotonic() + idle_seconds, str(stage / CLAIM)
    while time.monotonic() < deadline:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            data = b""
        else:
            try:
                data = os.read(fd, 512)
            finally:
                os.close(fd)
        if data.endswith(b"\n"):  # whole: the env server writes the line at once, the newline last
            return data.decode().strip()
        time.sleep(CLAIM_POLL_SECONDS)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlstack.episodes.inside.trial", description=__doc__.splitlines()[0])
    parser.add_argument("--stage", type=Path, default=STAGE)
    parser.add_argument("--wait-claim", action="store_true", help="a warm-pool pod: wait for the claim file first")
    parser.add_argument("--idle-seconds", type=float, default=600.0, help="with --wait-claim: exit 0 unclaimed after this")
    args = parser.parse_args(argv)
    if os.getpid() != 1:
        log(f"refusing to run as pid {os.getpid()}: only the container's first process may kill every other one")
        return NOT_INIT
    undumpable()
    signal.signal(signal.SIGTERM, lambda *_: (sweep(), os._exit(143)))  # the pod is being deleted
    if args.wait_claim:
        trial = wait_for_claim(args.stage, args.idle_seconds)
        if trial is None:
            log(f"not claimed within {args.idle_seconds:g}s: leaving the pool")
            return 0
        log(f"claimed by trial {trial}")

    plan = TrialPlan.model_validate_json(safefs.read_bytes(args.stage / PLAN, args.stage))
    tests = pack(args.stage / "tests")
    solution = pack(args.stage / "solution") if (args.stage / "solution").is_dir() else None
    for name in ("tests", "solution"):  # gone before the agent starts, or no agent at all
        shutil.rmtree(args.stage / name, ignore_errors=True)
        if os.path.lexists(args.stage / name):
            log(f"cannot remove the staged {name} ({args.stage / name}): refusing to start the agent beside them")
            return 1
    if solution is not None:
        unpack(solution, SOLUTION)
    base_env = dict(os.environ)
    outcome = run_phase(plan.agent, base_env, plan.kill_grace, LOGS_AGENT, "stdout.txt", "stderr.txt")
    safefs.write_text(LOGS_AGENT / EXIT_CODE_FILE, f"{outcome['exit_code']}\n", within=LOGS_AGENT)
    safefs.write_text(LOGS_AGENT / OUTCOME_FILE, json.dumps(outcome), within=LOGS_AGENT)

    # Nothing of the agent runs any more: what it left in these is removed, then the tests appear.
    safefs.clear_dir(LOGS_VERIFIER, within=LOGS_VERIFIER)
    safefs.clear_dir(SOLUTION, within=SOLUTION)
    unpack(tests, TESTS)
    outcome = run_phase(plan.verifier, base_env, plan.kill_grace, LOGS_VERIFIER, "test-stdout.txt", None)
    for directory in (LOGS_AGENT, LOGS_VERIFIER):
        open_up(directory)
    safefs.write_text(LOGS_VERIFIER / OUTCOME_FILE, json.dumps(outcome), within=LOGS_VERIFIER)
    open_up(LOGS_VERIFIER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
