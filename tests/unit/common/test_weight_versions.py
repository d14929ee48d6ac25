"""The one rule envs read weight versions by: this model's replicas only, oldest ready for a group's label, newest for the gate."""

import time

from rlstack.common.contracts.registry import Endpoint
from rlstack.common.weight_versions import policy_version, sampling_version


def endpoint(name: str, model: str, version: int, ready: bool = True) -> Endpoint:
    now = time.time()
    return Endpoint(id=name, url="http://127.0.0.1:1", model=model, weight_version=version,
                    ready=ready, registered_at=now, last_heartbeat=now, expires_at=now + 30)


def test_other_models_never_count():
    endpoints = [endpoint("a", "policy", 4), endpoint("b", "policy", 6), endpoint("c", "evaluator", 0), endpoint("e", "base", 9),
                 endpoint("d", "policy", 1, ready=False)]
    assert sampling_version(endpoints, "policy") == 4  # d is not ready: it answers no call now
    assert policy_version(endpoints, "policy") == 6  # d lags, but the gate counts from the newest
    assert sampling_version(endpoints, "nobody") is None and policy_version(endpoints, "nobody") == 0
