import asyncio
from types import SimpleNamespace

import pytest

from rlstack.trainer.sync import SyncFailed, fan_out


def replicas(*ids: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(id=i) for i in ids]


def test_one_dead_replica_is_reported_and_the_rest_are_synced():
    async def push(endpoint) -> None:
        if endpoint.id == "dead":
            raise ConnectionError("refused")

    done, failed = asyncio.run(fan_out(replicas("a", "dead", "b"), push))
    assert done == ["a", "b"] and set(failed) == {"dead"} and "refused" in failed["dead"]


def test_every_replica_failing_is_an_error_but_none_registered_is_not():
    async def push(endpoint) -> None:
        raise TimeoutError("pause hung")

    with pytest.raises(SyncFailed, match="pause hung"):
        asyncio.run(fan_out(replicas("a", "b"), push))
    assert asyncio.run(fan_out([], push)) == ([], {})
