"""SIGTERM with a slow model call in flight whose caller has hung up (``rlstack up`` stops the env
servers, and so their agents, before the proxy): the proxy exits 0 at once. It used to wait 30 s for
the call (uvicorn's drain) and then up to 60 s more in the token-in relay's close (aiohttp's default),
past ``rlstack up``'s grace, which killed it (seen on a Qwen3 run on CPU). The replica is the
benchmarks' simulated vLLM (``bench/sim_replica.py``) set to take two minutes per reply: no CPU
vLLM can be made that slow on purpose."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from rlstack.common.trial_keys import mint
from tests.conftest import PROXY_PYTHON, start_service
from tests.integration.inference.conftest import SECRET, sim_replica

SERVED = "slow-policy"
"""Its own served name: the session's proxy never routes to the slow simulation."""
GRACE_S = 15
"""Far under the 30 s the old proxy spent waiting for the call alone."""


@pytest.fixture
def slow_replica(registry, stack_logs) -> Iterator[str]:
    with sim_replica(registry, stack_logs, SERVED, "slow", tpot_ms=2000, completion_tokens=64) as url:
        yield url


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
