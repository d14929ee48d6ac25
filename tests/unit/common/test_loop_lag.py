"""The loop-lag monitor records how long a blocked event loop kept its sleep waiting."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from rlstack.common.loop_lag import LoopLag


def test_a_blocked_loop_shows_as_lag():
    registry = CollectorRegistry()
    lag = LoopLag(registry, "test", interval=0.01)

    async def scenario() -> None:
        task = asyncio.create_task(lag.run())
        await asyncio.sleep(0.05)
        time.sleep(0.2)  # a sync call blocking the loop
        await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(scenario())
    count = registry.get_sample_value("rlstack_test_event_loop_lag_seconds_count")
    over_150ms = count - registry.get_sample_value("rlstack_test_event_loop_lag_seconds_bucket", {"le": "0.15"})
    assert count >= 5
    assert over_150ms >= 1  # the sleep the block held up (another stall of a loaded machine may add one)
