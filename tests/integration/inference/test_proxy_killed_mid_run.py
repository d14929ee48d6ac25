"""A proxy SIGKILLed while an agent env server runs trials through it, then started again on its
port (what `rlstack up` or a Deployment does): the fault run's checks (``rlstack.ops.ledger``) find
every finished trial in a group the batcher acknowledged, abandoned with a reason, or left to the
env's next start; none lost, none posted twice. Real processes: registry, vLLM replica, LiteLLM
proxy, batcher, env server (the built-in agent in bubblewrap sandboxes).
"""

from __future__ import annotations

import time

import httpx

from rlstack.common.ports import free_port
from rlstack.ops.ledger import audit
from tests.conftest import PROXY_PYTHON, start_service
from tests.helpers.agent_env import agent_env_server, journal_entries
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import SECRET

RUN = "proxykill"


def posted(journal) -> int:  # noqa: ANN001
    return sum(e["kind"] == "posted" for e in journal_entries(journal, RUN, "proxykill-env"))


def test_a_proxy_killed_mid_run_loses_no_finished_trial(registry, replica, proxy, stack_logs, tmp_path):
    batcher_dir, journal = tmp_path / "batcher", tmp_path / "journal"
    batcher = start_service("batcher", ["--data-dir", str(batcher_dir)], stack_logs)
    httpx.post(f"{batcher.url}/register", json={"batch_size": 64, "max_token_len": 32768, "batch_fill": "at_least"},
               timeout=10).raise_for_status()
    port = free_port()
    args = ["--registry-url", registry.url, "--trials-dir", str(proxy.trials_dir), "--trial-key-secret", SECRET,
            "--max-tokens-cap", "64", "--watch-timeout-seconds", "2"]
    doomed = start_service("proxy", args, stack_logs, port=port, python=PROXY_PYTHON, ready_timeout=180)
    env = agent_env_server(registry.url, doomed.url, proxy.trials_dir, batcher, journal, stack_logs, RUN, "proxykill-env",
                           SECRET, workers=2)
    again = None
    try:
        wait_until(lambda: posted(journal) >= 1, timeout=240)
        doomed.proc.kill()  # trials in flight lose their proxy mid-call
        doomed.proc.wait(30)
        time.sleep(2)
        again = start_service("proxy", args, stack_logs, port=port, python=PROXY_PYTHON, ready_timeout=180)
        before = posted(journal)
        wait_until(lambda: posted(journal) >= before + 2, timeout=240)  # the run goes on through the new proxy
    finally:
        env.terminate()
        batcher.terminate()
        if again is not None:
            again.terminate()

    ledger = audit(proxy.trials_dir, journal, batcher_dir / "batcher.wal", tmp_path / "no-trainer.jsonl", run=RUN)
    assert ledger.trials["lost"] == 0 and not ledger.groups_acknowledged_lost, ledger
    assert ledger.trials["trained twice or more"] == 0 and not ledger.steps_recorded_twice
    assert ledger.trials["queued when the run stopped"] >= 2 * 3  # three groups of two, at least, acknowledged
