"""Event-loop lag: how late a task that asks to wake every ``interval`` actually wakes.

Anything that blocks a service's event loop (a sync file write, a scan, a big JSON dump, a CPU
starved process) delays every request and heartbeat behind it by as much; the overshoot of a
fixed sleep measures exactly that wait. Recorded as ``rlstack_<service>_event_loop_lag_seconds``
(a histogram: p99 over a window comes from its buckets, as ``histogram_quantile`` does) and run as
a supervised loop by the services that start it (registry, envs).
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Histogram

LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
               0.5, 0.75, 1.0, 2.0, 5.0)
INTERVAL_SECONDS = 0.05
"""Twenty wake-ups a second: fine enough to see a stall of a few ms, too few to cost anything."""


class LoopLag:
    def __init__(self, registry: CollectorRegistry, service: str, interval: float = INTERVAL_SECONDS) -> None:
        self.interval = interval
        self.histogram = Histogram(f"rlstack_{service}_event_loop_lag_seconds",
                                   f"How much later than asked a {interval * 1000:g} ms sleep of the event loop ended",
                                   registry=registry, buckets=LAG_BUCKETS)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.interval)
            self.histogram.observe(max(0.0, loop.time() - asked - self.interval))
