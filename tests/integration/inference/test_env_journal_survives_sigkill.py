"""An agent env server SIGKILLed after it finished a group's trials and before the batcher took
the group loses nothing and posts nothing twice: its journal holds the group, a restarted env
server posts it under the same Idempotency-Key, and a post the batcher had already taken is not
taken again. Real processes: registry, vLLM replica, LiteLLM proxy, batcher, env server (the
built-in agent in bubblewrap sandboxes).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx

from rlstack.common.process import ServiceProcess
from rlstack.ops.ledger import audit
from tests.conftest import start_service
from tests.helpers.agent_env import agent_env_server, journal_entries
from tests.integration.inference.conftest import SECRET

RUN = "journal"


def env_server(registry, proxy, batcher: ServiceProcess, journal: Path, logs: Path) -> ServiceProcess:  # noqa: ANN001
    return agent_env_server(registry.url, proxy.url, proxy.trials_dir, batcher, journal, logs, RUN, "journal-env", SECRET)


def entries(journal: Path) -> list[dict]:
    return journal_entries(journal, RUN, "journal-env")


def wait_until(condition, timeout: float = 180):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)
    return value


def landed(batcher_dir: Path, key: str) -> int:
    """How many groups the batcher logged under ``key`` (each record of its WAL names its key)."""
    wal = batcher_dir / "batcher.wal"
    return wal.read_bytes().count(key.encode()) if wal.exists() else 0


def test_a_killed_env_server_posts_its_finished_group_once(registry, replica, proxy, stack_logs, tmp_path):
    batcher_dir, journal = tmp_path / "batcher", tmp_path / "journal"
    batcher = start_service("batcher", ["--data-dir", str(batcher_dir)], stack_logs)
    httpx.post(f"{batcher.url}/register", json={"batch_size": 64, "max_token_len": 32768, "batch_fill": "at_least"},
               timeout=10).raise_for_status()
    env = env_server(registry, proxy, batcher, journal, stack_logs)
    try:
        wait_until(lambda: any(e["kind"] == "trial" for e in entries(journal)))
        os.kill(batcher.proc.pid, signal.SIGSTOP)  # the group's post will hang: the batcher never answers
        ready = wait_until(lambda: next((e for e in entries(journal) if e["kind"] == "ready"), None))
        os.kill(env.proc.pid, signal.SIGKILL)
        env.proc.wait(10)
    finally:
        os.kill(batcher.proc.pid, signal.SIGCONT)
    assert not any(e["kind"] == "posted" and e["group"] == ready["group"] for e in entries(journal))
    finished = [e for e in entries(journal) if e["kind"] == "trial"]
    assert len([e for e in finished if e["group"] == ready["group"]]) == 2
    [killed] = journal.glob(f"{RUN}-journal-env.*.jsonl")

    env = env_server(registry, proxy, batcher, journal, stack_logs)  # the same name and run: it takes the journal over
    try:
        wait_until(lambda: not killed.exists())  # settled and removed
        time.sleep(1)  # a hung post of the killed process could only land now: it did not (it never reached the batcher's log)
        assert landed(batcher_dir, ready["key"]) == 1
    finally:
        env.terminate()

    # Killed after the batcher took the group but before the journal said so: posted again, taken once.
    replayed = journal / f"{RUN}-journal-env.replayed.jsonl"
    replayed.write_text(json.dumps({"kind": "ready", "group": ready["group"], "key": ready["key"], "body": ready["body"]}) + "\n")
    env = env_server(registry, proxy, batcher, journal, stack_logs)
    try:
        wait_until(lambda: not replayed.exists())
        assert landed(batcher_dir, ready["key"]) == 1
    finally:
        env.terminate()
        batcher.terminate()
    abandoned = journal / f"{RUN}-journal-env.abandoned.jsonl"
    others = {e["trial"] for e in finished if e["group"] != ready["group"]}
    listed = {json.loads(line)["trial"] for line in abandoned.read_text().splitlines()} if abandoned.exists() else set()
    assert others <= listed  # any other finished trial of an unfinished group: abandoned, with its reason

    # the fault run's ledger (bench/faults.py), with no trainer: every finished trial is queued, abandoned or journaled
    ledger = audit(proxy.trials_dir, journal, batcher_dir / "batcher.wal", tmp_path / "no-trainer.jsonl", run=RUN)
    assert ledger.trials["lost"] == 0 and not ledger.groups_acknowledged_lost, ledger
    assert ledger.trials["queued when the run stopped"] >= 2 and ledger.trials["abandoned with a reason"] >= len(others)
