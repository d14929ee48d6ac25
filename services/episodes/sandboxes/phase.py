"""``python -m rlstack.episodes.sandboxes.phase``: run one trial phase inside a sandbox pod.

In a pod the agent and the verifier are containers in sequence (init container, then main), so
nobody outside can time them or catch their exit codes without exec websockets. This runner
does it in the pod: the command as its own process group under a timeout (SIGTERM, then
SIGKILL), stdout/stderr to files in the phase's log directory, and ``phase.json`` (a
``PhaseOutcome``) next to them on the shared trials volume, where the env server reads it.
It exits 0 whatever the command did, so the verifier still runs after a failed agent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

from rlstack.common import safefs
from rlstack.episodes.sandboxes.base import AGENT_EXIT_CODE, PhaseOutcome
from rlstack.episodes.sandboxes.procgroup import run_group

OUTCOME_FILE = "phase.json"


async def run_phase(command: list[str], out_dir: Path, timeout: float, kill_grace: float, stdout: str,
                    stderr: str | None) -> PhaseOutcome:
    out_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    try:
        done = await run_group(command, env=dict(os.environ), stdout=out_dir / stdout,
                               stderr=out_dir / stderr if stderr else None, timeout=timeout, kill_grace=kill_grace,
                               within=out_dir)
        exit_code, timed_out = done.returncode, done.timed_out
    except OSError as exc:  # the command does not exist: the phase failed, the pod goes on
        safefs.write_text(out_dir / stdout, f"cannot start {command[0]}: {exc}\n", within=out_dir)
        exit_code, timed_out = 127, False
    outcome = PhaseOutcome(started_at=started, finished_at=datetime.now(UTC), exit_code=exit_code, timed_out=timed_out)
    safefs.write_text(out_dir / OUTCOME_FILE, outcome.model_dump_json(), within=out_dir)  # never through a symlink
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlstack.episodes.sandboxes.phase", description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--kill-grace", type=float, default=2.0)
    parser.add_argument("--stdout", default="stdout.txt")
    parser.add_argument("--stderr", default=None)
    parser.add_argument("--exit-code-file", action="store_true", help=f"also write {AGENT_EXIT_CODE} (the agent phase)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    outcome = asyncio.run(run_phase(command, args.out_dir, args.timeout, args.kill_grace, args.stdout, args.stderr))
    if args.exit_code_file:
        safefs.write_text(args.out_dir / AGENT_EXIT_CODE, f"{outcome.exit_code}\n", within=args.out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
