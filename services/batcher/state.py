"""The batcher's state machine: trainer and env registrations, the group queue, the step.

No FastAPI here. Every change arrives as a log record applied in log order, live (after the
write is durable) and on replay alike, so a restart rebuilds exactly what was acknowledged.
Selection of a batch is synchronous (groups are reserved at once, so two concurrent /batch
calls never share a group) and becomes final when its record is durable.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from rlstack.batcher.packing import select_at_least, select_batch
from rlstack.batcher.records import (
    BatchServed,
    DataReset,
    EnvDisconnected,
    EnvRegistered,
    Event,
    GroupsDropped,
    IdempotencyKeys,
    Snapshot,
    StepsSaved,
    TrainerRegistered,
)
from rlstack.common.contracts.atropos import EnvRegistration, ScoredData, TrainerRegistration

MIN_ENV_WEIGHT = 0.01  # as Atropos: a low-weight env is throttled, never starved
REMEMBERED_KEYS = 65536
"""Idempotency keys kept (oldest forgotten first): far more posts than any client retries across."""
ALL_FIELDS = tuple(ScoredData.model_fields)


@dataclass
class QueuedGroup:
    group_id: int
    data: ScoredData
    raw: bytes | None = None
    """The client's own JSON object for this group, when it arrived alone."""
    _json: bytes | None = None

    @property
    def size(self) -> int:
        return len(self.data.tokens)

    def json(self) -> bytes:
        """The group as handed to trainers: every Atropos key present, nulls for unsent ones.

        A group that arrived alone is the client's validated bytes with the missing keys
        spliced in front (microseconds); one from a list is serialised from the model.
        """
        if self._json is None:
            if self.raw is not None:
                missing = b"".join(b'"%s":null,' % f.encode() for f in ALL_FIELDS if f not in self.data.model_fields_set)
                self._json = b"{" + missing + self.raw[1:]
            else:
                self._json = self.data.model_dump_json().encode()
        return self._json


@dataclass
class EnvEntry:
    env_id: int
    real_name: str
    registration: EnvRegistration
    connected: bool = True
    last_seen: float = field(default_factory=time.time)


@dataclass
class Counters:
    groups_accepted: int = 0
    sequences_accepted: int = 0
    batches_served: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {"stale": 0, "unbatchable": 0})


class BatcherState:
    def __init__(self, max_staleness: int | None = None) -> None:
        self.max_staleness = max_staleness
        self.counters = Counters()
        self.idempotency: OrderedDict[str, tuple[bytes, int]] = OrderedDict()
        """Posts by ``Idempotency-Key``: (body digest, groups accepted). Kept across /reset_data:
        a key names a request, and a retried request must not land after a reset either."""
        self._reset()

    def _reset(self) -> None:
        self.trainer: TrainerRegistration | None = None
        self.requesters = 0
        self.envs: list[EnvEntry] = []
        self.queue: OrderedDict[int, QueuedGroup] = OrderedDict()
        self.reserved: set[int] = set()
        self.queued_sequences = 0
        self.inflight_sequences = 0  # accepted in memory, waiting for the disk
        self.step = 0  # batches handed out (including ones whose record is in flight)
        self.served: OrderedDict[int, list[QueuedGroup]] = OrderedDict()
        """Batches handed out and not yet in a trainer checkpoint, by step (``replay_unsaved`` only)."""
        self.replay: list[int] = []
        """Steps of ``served`` to hand out again, in order: a resumed trainer lost them."""
        self.next_group_id = 0
        self.next_env_id = 0
        self.largest_group = 0
        self.latest: QueuedGroup | None = None

    # ----- applying log records (live and replay) -----

    def apply(self, event: Event) -> None:
        match event:
            case TrainerRegistered(registration=reg):
                if self.trainer is None:
                    self.trainer = reg
                    self.step = max(self.step, reg.starting_step)
                elif reg.replay_unsaved and reg.starting_step < self.step:
                    self._resume_from(reg.starting_step)
                self.requesters += 1
            case EnvRegistered(env_id=env_id, real_name=name, registration=reg):
                if env_id == len(self.envs):
                    self.envs.append(EnvEntry(env_id, name, reg))
                self.next_env_id = max(self.next_env_id, env_id + 1)
            case EnvDisconnected(env_id=env_id):
                if env_id < len(self.envs):
                    self.envs[env_id].connected = False
            case BatchServed(step=step, group_ids=ids):
                if step in self.replay:
                    self.replay.remove(step)
                if step not in self.served:  # a batch served again is in ``served`` already
                    groups = self._remove(ids)
                    if self.trainer is not None and self.trainer.replay_unsaved:
                        self.served[step] = groups
                self.step = max(self.step, step)
                self.counters.batches_served += 1
            case StepsSaved(step=saved):
                for step in [s for s in self.served if s <= saved]:
                    del self.served[step]
            case GroupsDropped(group_ids=ids, reason=reason):
                self.counters.dropped[reason] += len(self._remove(ids))
            case Snapshot(step=step, next_group_id=next_id, replay=replay):
                self.step = step
                self.next_group_id = max(self.next_group_id, next_id)
                self.replay = [s for s in replay if s in self.served]
            case DataReset():
                self._reset()
            case IdempotencyKeys(entries=entries):
                for key, digest, count in entries:
                    self.remember(key, bytes.fromhex(digest), count)

    def add_groups(self, first_id: int, groups: list[ScoredData], raw_single: bytes | None = None) -> None:
        """Queue accepted groups; ``raw_single`` is the request body when it held one group."""
        for offset, data in enumerate(groups):
            group = QueuedGroup(first_id + offset, data, raw_single if len(groups) == 1 else None)
            self.queue[group.group_id] = group
            self.queued_sequences += group.size
            self.largest_group = max(self.largest_group, group.size)
            self.counters.groups_accepted += 1
            self.counters.sequences_accepted += group.size
            self.latest = group
        self.next_group_id = max(self.next_group_id, first_id + len(groups))

    def _resume_from(self, starting_step: int) -> None:
        """A trainer back from its checkpoint at ``starting_step``: what it saved is done, what it
        lost after is served again before anything new."""
        for step in [s for s in self.served if s <= starting_step]:
            del self.served[step]
        self.replay = list(self.served)
        self.step = starting_step

    def remember(self, key: str, digest: bytes, count: int) -> None:
        self.idempotency[key] = (digest, count)
        self.idempotency.move_to_end(key)
        while len(self.idempotency) > REMEMBERED_KEYS:
            self.idempotency.popitem(last=False)

    def _remove(self, ids: list[int]) -> list[QueuedGroup]:
        removed = []
        for group_id in ids:
            group = self.queue.pop(group_id, None)
            self.reserved.discard(group_id)
            if group is not None:
                self.queued_sequences -= group.size
                removed.append(group)
        return removed

    # ----- decisions taken before a record is written -----

    def allocate_ids(self, count: int) -> int:
        first = self.next_group_id
        self.next_group_id += count
        return first

    def stale_ids(self) -> list[int]:
        """Groups older than ``step - max_staleness`` (never handed out, dropped and counted)."""
        if self.max_staleness is None:
            return []
        oldest_allowed = self.step - self.max_staleness
        return [
            gid
            for gid, g in self.queue.items()
            if gid not in self.reserved and g.data.weight_version is not None and g.data.weight_version < oldest_allowed
        ]

    def unbatchable_ids(self) -> list[int]:
        batch_size = self.trainer.batch_size if self.trainer else None
        if batch_size is None or self.largest_group <= batch_size or self.trainer.batch_fill == "at_least":
            return []  # the usual case: posts are checked against batch_size on arrival
        return [gid for gid, g in self.queue.items() if gid not in self.reserved and g.size > batch_size]

    def reserve_batch(self) -> tuple[int, list[QueuedGroup]] | None:
        """Pick the next batch, reserve its groups and take the next step number; a batch a resumed
        trainer lost comes first, with its step number."""
        assert self.trainer is not None
        if self.replay:
            self.step = self.replay.pop(0)
            return self.step, self.served[self.step]
        candidates = ((gid, g.size) for gid, g in self.queue.items() if gid not in self.reserved)
        if self.trainer.batch_fill == "at_least":
            ids = select_at_least(candidates, self.trainer.batch_size)
        else:
            ids = select_batch(candidates, self.trainer.batch_size)
        if ids is None:
            return None
        self.reserved.update(ids)
        self.step += 1
        return self.step, [self.queue[gid] for gid in ids]

    def release(self, step: int, groups: list[QueuedGroup]) -> None:
        """Undo a reservation whose record could not be written."""
        self.step = step - 1
        if step in self.served:
            self.replay.insert(0, step)
            return
        for group in groups:
            self.reserved.discard(group.group_id)

    # ----- views -----

    @property
    def available_groups(self) -> int:
        return len(self.queue) - len(self.reserved)

    def env_weights(self, live: set[int] | None = None) -> dict[int, float]:
        """Each counted env's share (connected, and live when ``live`` is given): Atropos's
        ``max_token_length x weight`` over the sum, at least ``MIN_ENV_WEIGHT``."""
        counted = [e for e in self.envs if e.connected and (live is None or e.env_id in live)]
        total = sum(e.registration.max_token_length * e.registration.weight for e in counted)
        return {
            e.env_id: max(MIN_ENV_WEIGHT, e.registration.max_token_length * e.registration.weight / total) if total > 0 else 1.0
            for e in counted
        }

    def queued_by_env(self) -> dict[int | None, int]:
        """Sequences waiting (not reserved), by the env id their groups carry."""
        queued: dict[int | None, int] = {}
        for gid, g in self.queue.items():
            if gid not in self.reserved:
                queued[g.data.env_id] = queued.get(g.data.env_id, 0) + g.size
        return queued

    @property
    def available_sequences(self) -> int:
        return self.queued_sequences - sum(self.queue[g].size for g in self.reserved if g in self.queue)

    def env_status(self, env_id: int, live: set[int] | None = None) -> dict[str, float | int]:
        """Atropos's /status-env numbers: how much of the queue this env may count on. ``live``: the
        envs whose lease is current (the weight is shared among them only)."""
        env = self.envs[env_id]
        group_size = env.registration.group_size
        counted = [e for e in self.envs if e.connected and (live is None or e.env_id in live)]
        weight = self.env_weights(live).get(env_id, 1.0 if not counted else MIN_ENV_WEIGHT)
        min_alloc = sum(e.registration.min_batch_allocation or 0.0 for e in counted)
        own_sequences = 0
        max_group_size = 1
        for gid, g in self.queue.items():
            if gid in self.reserved:
                continue
            max_group_size = max(max_group_size, g.size)
            if g.data.env_id == env_id:
                own_sequences += g.size
        return {
            "current_step": self.step,
            "queue_size": self.available_sequences // group_size,
            "unallocated_fraction": 1.0 - min(min_alloc, 1.0),
            "self_queue_size": own_sequences // group_size,
            "max_group_size": max_group_size,
            "env_weight": weight,
        }

    def snapshot_events(self) -> list[Event]:
        """Events that rebuild the non-group state; the groups (queued, then served) follow them, then ``snapshot_tail``."""
        events: list[Event] = []
        if self.idempotency:
            events.append(IdempotencyKeys(entries=[(k, d.hex(), n) for k, (d, n) in self.idempotency.items()]))
        if self.trainer is not None:
            events.append(TrainerRegistered(registration=self.trainer))
        for env in self.envs:
            events.append(EnvRegistered(env_id=env.env_id, real_name=env.real_name, registration=env.registration))
            if not env.connected:
                events.append(EnvDisconnected(env_id=env.env_id))
        return events

    def snapshot_tail(self) -> list[Event]:
        """After the groups: the batches served and not yet saved, then the step (last, as a replay may run behind them)."""
        served: list[Event] = [BatchServed(step=step, group_ids=[g.group_id for g in groups]) for step, groups in self.served.items()]
        return [*served, Snapshot(step=self.step, next_group_id=self.next_group_id, replay=list(self.replay))]
