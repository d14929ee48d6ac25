"""Is the trainer starving: how long its ``/batch`` polls have come back empty, and when that wait
has become a stall worth a log line, a metric and an alert.

A trainer that asks and gets nothing is the one fact every hold-back rule must yield to: while it
waits, env servers are told so (``trainer_waiting`` in ``/status-env``) and produce whatever their
share says. When it has waited ``stall_after_seconds`` and nothing is coming (no live env, every
live env holding back, or no group for that long), the run is stalled, and the batcher says why.
With several policies each trainer is judged on its own queue: one starving while the other is fed
is that policy's stall.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from rlstack.batcher.leases import EnvLeases
from rlstack.batcher.state import BatcherState
from rlstack.common.contracts.progress import EnvFlow, ProgressReport


class TrainerWait:
    """Empty ``/batch`` answers since the last batch served. A trainer that stopped polling (killed,
    finished, or busy in a step) is not waiting: only polls within ``poll_window`` count."""

    def __init__(self, poll_window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.poll_window = poll_window
        self.clock = clock
        self.since: float | None = None
        self.last_poll: float | None = None

    def empty(self) -> None:
        now = self.clock()
        if self.since is None or self.last_poll is None or now - self.last_poll > self.poll_window:
            self.since = now  # a new wait: one after a gap in polling starts afresh
        self.last_poll = now

    def served(self) -> None:
        self.since = None
        self.last_poll = self.clock()

    def seconds(self) -> float | None:
        if self.since is None or self.last_poll is None:
            return None
        now = self.clock()
        if now - self.last_poll > self.poll_window:
            return None
        return now - self.since


StallChange = Literal["began", "ended"]


class StallWatch:
    """Turns a stream of stalled / not-stalled verdicts into episodes: counted once, logged at the
    start, again every ``repeat_seconds`` while it lasts, and at its end."""

    def __init__(self, repeat_seconds: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.repeat_seconds = repeat_seconds
        self.clock = clock
        self.since: float | None = None
        self.last_said: float = 0.0
        self.episodes = 0
        self.last_duration = 0.0
        """How long the episode that ended last lasted."""

    @property
    def stalled(self) -> bool:
        return self.since is not None

    def update(self, stalled: bool) -> tuple[StallChange | None, bool]:
        """(what changed, whether to say it again now)."""
        now = self.clock()
        if stalled and self.since is None:
            self.since = self.last_said = now
            self.episodes += 1
            return "began", True
        if not stalled and self.since is not None:
            self.last_duration, self.since = now - self.since, None
            return "ended", True
        if stalled and now - self.last_said >= self.repeat_seconds:
            self.last_said = now
            return None, True
        return None, False

    def lasted(self) -> float:
        return 0.0 if self.since is None else self.clock() - self.since


def progress_report(state: BatcherState, leases: EnvLeases, wait: TrainerWait, stall_after: float, quiet_since: float,
                    any_group: bool, policy: str | None = None) -> ProgressReport:
    """One policy's flow now (its queue and trainer; the envs are every policy's); ``quiet_since``:
    when its last group arrived (or the batcher started, when ``any_group`` is False)."""
    live = leases.live_ids()
    weights = state.env_weights(live)
    queued = state.queued_by_env()
    envs = []
    for env in state.envs:
        seen, posted = leases.seconds_since(env.env_id)
        envs.append(EnvFlow(
            env_id=env.env_id, name=env.real_name, connected=env.connected, live=env.env_id in live,
            seen_seconds_ago=seen, queued_sequences=queued.get(env.env_id, 0), weight=weights.get(env.env_id, 0.0),
            holding_back=leases.holding_back(env.env_id) if env.env_id in live else None, last_post_seconds_ago=posted,
        ))
    waiting = wait.seconds()
    quiet = wait.clock() - quiet_since
    producers = [e for e in envs if e.connected and e.live]
    stalled = waiting is not None and waiting >= stall_after and (
        not producers or all(e.holding_back is not None for e in producers) or quiet >= stall_after)
    return ProgressReport(
        policy=policy, step=state.step, batch_size=state.trainer.batch_size if state.trainer else None,
        queue_sequences=state.available_sequences, trainer_waiting_seconds=waiting,
        last_group_seconds_ago=quiet if any_group else None, stall_after_seconds=stall_after, stalled=stalled, envs=envs,
    )
