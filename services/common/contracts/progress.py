"""``GET /progress`` on the batcher (an rlstack extension): is the run moving, and if not, why.

One model and one sentence, so the batcher's log, the trainer's log and ``rlstack doctor`` name a
starved trainer in the same words, with the numbers that decide it.
"""

from __future__ import annotations

from pydantic import BaseModel

from rlstack.common.contracts.atropos import HoldReason


class EnvFlow(BaseModel):
    """One registered env as the batcher sees it now."""

    env_id: int
    name: str
    connected: bool
    """False once it said ``/disconnect-env``."""
    live: bool
    """Its lease is current: it polled ``/status-env`` (or registered) within the lease."""
    seen_seconds_ago: float | None
    """Since its last poll or registration (None: not since the batcher started)."""
    queued_sequences: int
    """Its own sequences waiting in the queue (a dead env's stay there and are trained)."""
    weight: float
    """Its share among the live envs (0 when not live)."""
    holding_back: HoldReason | None = None
    """Why it held back at its last poll, when it says (rlstack's envs do)."""
    last_post_seconds_ago: float | None = None


class ProgressReport(BaseModel):
    policy: str | None = None
    """The policy whose trainer and queue these are (``?policy=``; unset: the batcher's first). None
    from a batcher older than policies."""
    step: int
    batch_size: int | None
    """The registered trainer's batch, in sequences (None: no trainer yet)."""
    queue_sequences: int
    """Sequences queued and not reserved for a batch."""
    trainer_waiting_seconds: float | None
    """How long the trainer's ``/batch`` polls have come back empty (None: it is not waiting)."""
    last_group_seconds_ago: float | None
    """Since the batcher last accepted a group (None: none since it started)."""
    stall_after_seconds: float
    stalled: bool
    """The trainer has waited ``stall_after_seconds`` and no env is producing for it: none is live,
    every live env holds back, or no group has arrived in that time."""
    envs: list[EnvFlow]

    def describe(self) -> str:
        """One line: what the trainer waits for, what the queue holds, what each env is doing."""
        if self.batch_size is None:
            return "no trainer registered"
        if self.trainer_waiting_seconds is None:
            head = f"trainer not waiting (step {self.step}; queue {self.queue_sequences} of a {self.batch_size}-sequence batch)"
        else:
            head = (f"trainer waiting {self.trainer_waiting_seconds:.0f}s for {self.batch_size} sequences; "
                    f"queue {self.queue_sequences}")
        live = [e for e in self.envs if e.connected and e.live]
        holding = [e for e in live if e.holding_back is not None]
        producing = [e for e in live if e.holding_back is None]
        silent = [e for e in self.envs if e.connected and not e.live]
        parts = [head]
        if holding:
            parts.append("envs holding back: " + ", ".join(
                f"{e.name} (env {e.env_id}: {e.queued_sequences} queued, weight {e.weight:.2f}, {e.holding_back})" for e in holding))
        if producing:
            parts.append(("other live envs: " if holding else "live envs: ") + ", ".join(
                f"{e.name} (env {e.env_id}: {e.queued_sequences} queued, weight {e.weight:.2f}"
                + (f", last group {e.last_post_seconds_ago:.0f}s ago)" if e.last_post_seconds_ago is not None else ", no group yet)")
                for e in producing))
        if silent:
            parts.append("silent, lease expired: " + ", ".join(
                f"{e.name} (env {e.env_id}: {e.queued_sequences} queued"
                + (f", last seen {e.seen_seconds_ago:.0f}s ago)" if e.seen_seconds_ago is not None else ")") for e in silent))
        if not live:
            parts.append("no live env")
        if self.last_group_seconds_ago is not None:
            parts.append(f"last group {self.last_group_seconds_ago:.0f}s ago")
        return "; ".join(parts)
