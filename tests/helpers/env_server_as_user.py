"""Run an env server's trial code as the chart's env-server user (10001:10001), not as the test's.

The kubernetes trial backend makes each trial's directories on the shared claim, and the sandbox
pod must then write into them: whether it can depends on both identities. The tests run as root
(CI does), which can write anything, so here the env side runs in a child process that is the
chart's env-server user, in the same kind of bubblewrap container the fake kubelet uses (the
interpreter lives under root's private home on these machines). The claim is bound at the same
path, so paths in results mean the same thing in the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlstack.episodes.sandboxes.bwrap import Bind
from rlstack.episodes.trials import TrialResult, TrialSpec
from tests.helpers.fake_kubelet import container_argv

ENV_USER = ENV_GROUP = 10001
"""The chart's podSecurityContext: every rlstack pod, the env server's included, runs as this."""

CHILD = r"""
import asyncio, json, sys
from pathlib import Path
from rlstack.episodes.sandboxes import KubernetesSandboxConfig, build_sandbox
from rlstack.episodes.trials import TrialSpec, run_trial
from rlstack.kube.connection import connect
from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxOwner

req = json.loads(sys.argv[1])
trials = Path(req["trials"])
trials.mkdir(parents=True, exist_ok=True)  # as the env server does on a fresh claim
manager = SandboxManager(connect(req["api"], req["namespace"]), req["namespace"], req["run"],
                         owner=SandboxOwner(name="env-0", uid="u-0"))
box = build_sandbox(KubernetesSandboxConfig(environment="host", image="rlstack:test", claim_name="shared", trials_dir=trials,
                                            trials_subpath="trials", python=sys.executable), manager)

async def main():
    specs = [TrialSpec.model_validate(s) for s in req["specs"]]
    return await asyncio.gather(*(run_trial(s, box, trials) for s in specs))

print("RESULTS " + json.dumps([r.model_dump(mode="json") for r in asyncio.run(main())]))
"""


def can_switch_users() -> bool:
    return os.geteuid() == 0


@contextmanager
def shared_claim() -> Iterator[Path]:
    """A claim's root as a provisioner makes it (world-writable), somewhere every user can reach."""
    parent = Path(tempfile.mkdtemp(prefix="rlstack-claim-", dir="/tmp"))
    os.chmod(parent, 0o755)
    claim = parent / "claim"
    claim.mkdir()
    os.chmod(claim, 0o777)
    try:
        yield claim
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def start_trials(api_url: str, namespace: str, run: str, claim: Path, specs: list[TrialSpec],
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """The env side of ``specs`` as the env-server user; ``finish`` collects the results."""
    request = {"api": api_url, "namespace": namespace, "run": run, "trials": str(claim / "trials"),
               "specs": [s.model_dump(mode="json") for s in specs]}
    argv = container_argv([Bind(claim, str(claim), writable=True)], hide=[], command=[sys.executable, "-c", CHILD, json.dumps(request)],
                          chdir="/", identity=(ENV_USER, ENV_GROUP, ()), writable_tmp=True)
    child_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", **(env or {})}
    return subprocess.Popen(argv, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 300) -> list[TrialResult]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, f"env side failed ({proc.returncode}): {err[-3000:]}"
    return [TrialResult.model_validate(r) for r in json.loads(lines[-1].removeprefix("RESULTS "))]
