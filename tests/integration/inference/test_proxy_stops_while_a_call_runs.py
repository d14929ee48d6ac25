"""SIGTERM with a slow model call in flight whose caller has hung up (``rlstack up`` stops the env
servers, and so their agents, before the proxy): the proxy exits 0 at once. It used to wait 30 s for
the call (uvicorn's drain) and then up to 60 s more in the token-in relay's close (aiohttp's default),
past ``rlstack up``'s grace, which killed it (seen on a Qwen3 run on CPU). The replica is the
benchmarks' simulated vLLM (``bench/sim_replica.py``) set to take two minutes per reply: no CPU
vLLM can be made that slow on purpose."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest

from rlstack.common.trial_keys import mint
from tests.conftest import PROXY_PYTHON, REPO, free_port, start_service
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import SECRET, endpoint

SERVED = "slow-policy"
"""Its own served name: the session's proxy never routes to the slow simulation."""
GRACE_S = 15
"""Far under the 30 s the old proxy spent waiting for the call alone."""


@pytest.fixture
def slow_replica(registry, stack_logs) -> Iterator[str]:
    port = free_port()
    with (stack_logs / f"slow-sim-{port}.log").open("w") as log:
        process = subprocess.Popen([sys.executable, str(REPO / "bench" / "sim_replica.py"), "--ports", str(port), "--registry-url", registry.url,
                                    "--heartbeat-seconds", "1", "--served-model-name", SERVED, "--replica-prefix", "slow",
                                    "--ttft-ms", "5", "--tpot-ms", "2000", "--completion-tokens", "64", "--max-model-len", "4096"],
                                   cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: endpoint(registry, "slow-0").get("ready") is True, timeout=60)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


def test_sigterm_cancels_a_call_whose_caller_left_and_exits_zero(registry, slow_replica, stack_logs, tmp_path):
    proxy = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(tmp_path / "trials"), "--trial-key-secret", SECRET,
                                    "--served-model-name", SERVED, "--max-tokens-cap", "64", "--watch-timeout-seconds", "2"],
                          stack_logs, python=PROXY_PYTHON, ready_timeout=180)
    try:
        left = threading.Event()

        def agent() -> None:
            """Asks for 64 tokens (two minutes) and hangs up after two seconds, as a killed agent does."""
            body = {"model": SERVED, "messages": [{"role": "user", "content": "Count."}], "max_tokens": 64}
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {mint(SECRET, 'stop', 't0')}"},
                           timeout=2)
            left.set()

        caller = threading.Thread(target=agent)
        caller.start()
        caller.join(30)
        assert left.is_set()
        code = proxy.terminate(grace=GRACE_S)
        assert code == 0, f"the proxy did not exit within {GRACE_S}s of SIGTERM (exit {code}):\n{proxy.log()[-3000:]}"
        assert "cancelling 1 model call(s) whose caller has gone" in proxy.log()
        assert "proxy stopped" in proxy.log()  # the lifespan's shutdown half ran: records flushed
    finally:
        proxy.terminate()
