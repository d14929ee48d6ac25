"""An agent env server as a process for kill tests: the built-in agent, one turn of a few tokens,
in bubblewrap sandboxes, on the example tasks; its journal's entries read back."""

from __future__ import annotations

import json
from pathlib import Path

from rlstack.common.process import ServiceProcess
from tests.conftest import REPO, start_service


def agent_env_server(registry_url: str, proxy_url: str, trials_dir: Path, batcher: ServiceProcess, journal: Path, logs: Path,
                     run: str, name: str, secret: str, workers: int = 1) -> ServiceProcess:
    return start_service("envs", [
        "--task", "harbor", "--tasks-dir", str(REPO / "examples" / "tasks"), "--agent", "builtin", "--sandbox", "local", "--sandbox-environment", "host",
        "--agent-max-turns", "1", "--max-tokens", "8", "--trials-dir", str(trials_dir), "--journal-dir", str(journal),
        "--batcher-url", batcher.url, "--proxy-url", proxy_url, "--registry-url", registry_url, "--run-id", run,
        "--name", name, "--group-size", "2", "--workers", str(workers), "--max-concurrent-trials", str(workers),
        "--trial-key-secret", secret, "--trial-retries", "3"], logs, ready_timeout=120)


def journal_entries(journal: Path, run: str, name: str) -> list[dict]:
    """Every journal line of the run's env servers, the killed ones' and the live one's."""
    lines = [line for path in sorted(journal.glob(f"{run}-{name}.*.jsonl")) if not path.name.endswith("abandoned.jsonl")
             for line in path.read_text().splitlines()]
    return [json.loads(line) for line in lines if line.strip().endswith("}")]
