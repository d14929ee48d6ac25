"""Which replicas the trainer publishes to again while it waits for a batch: ready ones on weights
older than its own (the fault run's killed replica came back on the base model, version 0)."""

from rlstack.common.contracts.registry import Endpoint
from rlstack.trainer.replica_watch import replicas_behind


def replica(name: str, version: int, ready: bool = True) -> Endpoint:
    return Endpoint(id=name, url="http://127.0.0.1:1", model="policy", weight_version=version, ready=ready,
                    registered_at=0, last_heartbeat=0, expires_at=1e12)


def test_a_replica_back_on_the_base_weights_is_behind_and_one_on_ours_is_not():
    endpoints = [replica("restarted", 0), replica("current", 12), replica("ahead", 13), replica("loading", 0, ready=False)]
    assert replicas_behind(endpoints, 12) == {"restarted"}
    assert replicas_behind(endpoints, 0) == set()
