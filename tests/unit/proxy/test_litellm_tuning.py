"""The proxy's LiteLLM settings (``proxy.litellm_tuning``) do what they claim, in LiteLLM itself
(the proxy's venv, in a subprocess): calls priced at zero without per-call registration, the
OpenTelemetry import not retried from disk, the start-up heap frozen."""

import json
import subprocess

from tests.conftest import PROXY_PYTHON

SCRIPT = r"""
import asyncio, gc, json, sys
import litellm
from litellm.integrations.custom_logger import CustomLogger
from rlstack.common.contracts.registry import Endpoint
from rlstack.proxy.litellm_tuning import GEN0_THRESHOLD, OTEL_LOGGER, freeze_startup_heap, skip_absent_opentelemetry
from rlstack.proxy.replicas import ReplicaView
from rlstack.proxy.routing.discovery import model_list

out = {}

# Zero prices, registered with the deployment, not on each call.
view = ReplicaView("policy", 32768)
view.endpoints = {"r0": Endpoint(id="r0", url="http://127.0.0.1:9", model="policy", ready=True, registered_at=0,
                                 last_heartbeat=0, expires_at=1e12)}
deployments, fallbacks = model_list(view, None, 60)
router = litellm.Router(model_list=deployments, fallbacks=fallbacks)
registrations = []
original = litellm.register_model
litellm.register_model = lambda *a, **k: (registrations.append(1), original(*a, **k))[1]

class Costs(CustomLogger):
    def __init__(self):
        super().__init__()
        self.seen = []
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        payload = kwargs.get("standard_logging_object") or {}
        self.seen.append({"cost": kwargs.get("response_cost"), "diagnostic": payload.get("zero_cost_diagnostic")})

costs = Costs()
litellm.callbacks.append(costs)

async def calls():
    for _ in range(3):
        await router.acompletion(model="policy", messages=[{"role": "user", "content": "hi"}], mock_response="hello")
    for _ in range(100):
        if len(costs.seen) >= 3:
            break
        await asyncio.sleep(0.05)

asyncio.run(calls())
out["registrations_per_call"] = len(registrations) / 3
out["prices"] = [litellm.model_cost.get(d["model_info"]["id"], {}).get(k) for d in deployments
                 for k in ("input_cost_per_token", "output_cost_per_token")]
out["costs"] = costs.seen

# The OpenTelemetry logger: tried once, then never read from disk again.
opened = []
sys.addaudithook(lambda event, args: opened.append(args[0]) if event == "open" and "otel" in str(args[0]) else None)
skip_absent_opentelemetry()
opened.clear()
failures = 0
for _ in range(20):
    try:
        __import__(OTEL_LOGGER)
    except ImportError:
        failures += 1
out["otel_import_failures"] = failures
out["otel_files_opened"] = len(opened)

# The start-up heap: frozen, and the young generation collected less often.
freeze_startup_heap()
out["frozen"] = gc.get_freeze_count()
out["gen0_threshold"] = gc.get_threshold()[0]
out["gen0_expected"] = GEN0_THRESHOLD
print(json.dumps(out))
"""


def test_litellm_tuning_in_litellm():
    result = subprocess.run([str(PROXY_PYTHON), "-c", SCRIPT], capture_output=True, text=True, timeout=180,
                            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["registrations_per_call"] == 0  # pricing in litellm_params would register on every call
    assert out["prices"] == [0.0] * 4  # both deployments of the replica, both directions: said, not looked up
    assert [c["cost"] for c in out["costs"]] == [0.0, 0.0, 0.0]
    assert all(c["diagnostic"] is None for c in out["costs"])
    if out["otel_import_failures"]:  # the SDK is absent here (we install none): failing must not read the module again
        assert out["otel_import_failures"] == 20
        assert out["otel_files_opened"] == 0
    assert out["frozen"] > 100_000  # LiteLLM's import alone leaves hundreds of thousands of objects
    assert out["gen0_threshold"] == out["gen0_expected"]
