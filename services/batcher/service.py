"""The batcher's use cases: validate, log durably, apply; hand out batches; replay on start.

Sits between the HTTP routes (api.py) and the state machine (state.py); owns the write-ahead
log and decides what is rejected (422), throttled (503) or accepted.

A run training several policies (``--policies``) gets one queue and one trainer per policy, each a
``BatcherState`` of its own, behind one log, one set of env registrations and one idempotency
table: a trial group's per-policy groups land in one keyed post, and each policy's trainer takes
batches of its own groups only. Whatever names no policy is the first's, so Atropos clients see
one queue as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.flow import StallWatch, TrainerWait, progress_report
from rlstack.batcher.leases import EnvLeases
from rlstack.batcher.records import (
    DIGEST_BYTES,
    BatchServed,
    DataReset,
    EnvDisconnected,
    EnvRegistered,
    Event,
    GroupsDropped,
    IdempotencyKeys,
    RecordKind,
    Snapshot,
    StepsSaved,
    TrainerRegistered,
    decode_groups,
    decode_keyed_groups,
    encode_event,
    encode_groups,
    encode_keyed_groups,
    event_adapter,
)
from rlstack.batcher.state import BatcherState
from rlstack.batcher.validation import (
    GroupRejected,
    check_shapes,
    check_trials,
    check_vocab,
    error,
    from_pydantic,
)
from rlstack.batcher.wal import WriteAheadLog
from rlstack.common.contracts.atropos import (
    EnvRegistration,
    EnvStatusQuery,
    ScoredData,
    TrainerRegistration,
)
from rlstack.common.contracts.progress import ProgressReport

log = logging.getLogger(__name__)
_group_list = TypeAdapter(list[ScoredData])
KEY_PATTERN = re.compile(r"[\x21-\x7e]{1,200}")
"""An ``Idempotency-Key``: printable ASCII without spaces, as in the IETF draft's examples (UUIDs)."""
NO_TRAINER = {"status": "error", "message": "Trainer not registered. Call /register first.", "batch": []}
REJECT_REASONS = ("too_large", "queue_full", "schema", "invalid")


class BatcherService:
    def __init__(self, settings: BatcherSettings, wal: WriteAheadLog) -> None:
        self.settings = settings
        self.states = {policy: BatcherState(max_staleness=settings.max_staleness) for policy in settings.policies}
        """Each policy's queue, trainer and step."""
        self.default = settings.policies[0]
        self.state = self.states[self.default]
        """The first policy's: what a group, a trainer or a request that names none uses (Atropos's one
        queue). It also holds what every policy shares: the idempotency table and the env list."""
        self.wal = wal
        self.rejected: dict[str, int] = dict.fromkeys(REJECT_REASONS, 0)
        """Every reason from the start, so /metrics shows 0 rather than no series."""
        self._pending_keys: dict[str, asyncio.Task[int]] = {}
        """Keyed posts being written now: a retry racing its original waits for it."""
        self.leases = EnvLeases(settings.env_lease_seconds)
        self.trainer_waits = {policy: TrainerWait(settings.trainer_poll_window_seconds) for policy in settings.policies}
        self.trainer_wait = self.trainer_waits[self.default]
        self.stalls = {policy: StallWatch() for policy in settings.policies}
        """Each policy's stall episodes: one trainer starving while the other is fed is a stall of its own."""
        self.stall = self.stalls[self.default]
        self.started = time.monotonic()
        self.last_group: float | None = None
        """When a group was last accepted (monotonic)."""
        self.last_groups: dict[str, float] = {}
        """When a group of each policy was last accepted (monotonic)."""

    # ----- lifecycle -----

    def replay(self) -> int:
        """Rebuild the state from the log; returns the number of records read."""
        count = 0
        for kind, payload in self.wal.open():
            count += 1
            if kind == RecordKind.EVENT:
                self.apply(event_adapter.validate_json(payload))
            elif kind == RecordKind.GROUPS:
                first_id, raw = decode_groups(payload)
                groups, single = _parse_groups(raw)
                self._add_groups(first_id, groups, single)
            elif kind == RecordKind.KEYED_GROUPS:
                first_id, key, digest, raw = decode_keyed_groups(payload)
                groups, single = _parse_groups(raw)
                self._add_groups(first_id, groups, single)
                self.state.remember(key, digest, len(groups))
        self.leases.adopt(e.env_id for e in self.state.envs if e.connected)
        for policy, state in self.states.items():
            log.info("replayed %d records: policy %s at step %d, %d groups queued, %d envs",
                     count, policy, state.step, len(state.queue), len(state.envs))
        return count

    def queue_of(self, policy: str | None) -> BatcherState:
        """A policy's queue; the first's for none. An undeclared one is refused naming ``policy``."""
        name = policy or self.default
        state = self.states.get(name)
        if state is None:
            raise GroupRejected(422, [error(("policy",), f"policy {name!r} is not one of this batcher's {list(self.states)}")],
                                "policy")
        return state

    def apply(self, event: Event) -> None:
        """An event to the queue it concerns: a trainer's, a batch's and a step's to their policy's;
        envs, resets and drops to every queue; the idempotency table to the first's."""
        match event:
            case TrainerRegistered(registration=reg):
                self._replayed_queue(reg.policy).apply(event)
            case BatchServed(policy=policy) | StepsSaved(policy=policy) | Snapshot(policy=policy):
                self._replayed_queue(policy).apply(event)
            case IdempotencyKeys():
                self.state.apply(event)
            case _:
                for state in self.states.values():
                    state.apply(event)

    def _replayed_queue(self, policy: str | None) -> BatcherState:
        state = self.states.get(policy or self.default)
        if state is None:
            raise ValueError(f"the log names policy {policy!r}, which --policies {list(self.states)} lacks: start the "
                             "batcher with every policy of the run")
        return state

    def _add_groups(self, first_id: int, groups: list[ScoredData], raw_single: bytes | None) -> None:
        for offset, group in enumerate(groups):
            self._replayed_queue(group.policy).add_groups(first_id + offset, [group], raw_single if len(groups) == 1 else None)
        for state in self.states.values():  # ids are the batcher's, not a queue's
            state.next_group_id = max(state.next_group_id, first_id + len(groups))

    def _tag(self, policy: str) -> str | None:
        """What a record names: nothing (null) for the first policy, as every record written before policies."""
        return None if policy == self.default else policy

    async def maybe_compact(self) -> bool:
        """Rewrite the log as a snapshot once it is large and mostly consumed."""
        live_bytes = self.queued_sequences * 4096  # rough upper bound per sequence
        if self.wal.size < self.settings.compact_min_bytes or self.wal.size < 2 * live_bytes:
            return False
        await self.wal.rewrite(self._snapshot_records)
        return True

    def _snapshot_records(self) -> list[tuple[int, bytes]]:
        records = [encode_event(e) for e in self.state.snapshot_events()]  # keys, the first's trainer, the envs
        for policy, state in self.states.items():
            if policy != self.default and state.trainer is not None:
                records.append(encode_event(TrainerRegistered(registration=state.trainer)))
        for state in self.states.values():
            served = (g for batch in state.served.values() for g in batch)
            for group in [*state.queue.values(), *served]:  # each names its policy: replay files it there
                records.append(encode_groups(group.group_id, group.data.model_dump_json().encode()))
        for policy, state in self.states.items():
            records += [encode_event(e.model_copy(update={"policy": self._tag(policy)})) for e in state.snapshot_tail()]
        return records

    @property
    def queued_sequences(self) -> int:
        return sum(state.queued_sequences for state in self.states.values())

    # ----- registration -----

    async def register_trainer(self, registration: TrainerRegistration) -> dict[str, int]:
        state = self.queue_of(registration.policy)
        if registration.batch_size > self.settings.max_queue_sequences:
            raise GroupRejected(
                422, [error(("batch_size",), f"exceeds the queue bound ({self.settings.max_queue_sequences} sequences)")],
                "batch_size",
            )
        await self._log_event(TrainerRegistered(registration=registration))
        return {"uuid": state.requesters}

    async def register_env(self, registration: EnvRegistration) -> dict[str, Any]:
        """An env joins once every policy has its trainer (its groups may be any policy's)."""
        if any(state.trainer is None for state in self.states.values()):
            return {"status": "wait for trainer to start"}
        trainer = self.state.trainer
        assert trainer is not None
        for policy, state in self.states.items():
            assert state.trainer is not None
            if registration.group_size > state.trainer.batch_size:
                whose = "the trainer's" if len(self.states) == 1 else f"policy {policy!r}'s trainer's"
                raise GroupRejected(
                    422, [error(("group_size",), f"{registration.group_size} exceeds {whose} batch_size {state.trainer.batch_size}")],
                    "group_size",
                )
        env_id = self.state.next_env_id
        self.state.next_env_id += 1  # taken now: a concurrent registration gets the next id
        same_name = sum(e.registration.desired_name == registration.desired_name for e in self.state.envs)
        event = EnvRegistered(env_id=env_id, real_name=f"{registration.desired_name}_{same_name}", registration=registration)
        await self._log_event(event)
        self.leases.touch(env_id)
        return {
            "status": "success",
            "env_id": env_id,
            "wandb_name": event.real_name,
            "checkpoint_dir": trainer.checkpoint_dir,
            "starting_step": self.state.step,
            "checkpoint_interval": trainer.save_checkpoint_interval,
            "num_steps": trainer.num_steps,
        }

    async def disconnect_env(self, env_id: int) -> None:
        self.require_env(env_id)
        await self._log_event(EnvDisconnected(env_id=env_id))

    def require_env(self, env_id: int) -> None:
        if not 0 <= env_id < len(self.state.envs):  # never a negative index into another env's slot
            raise GroupRejected(404, [error(("env_id",), f"no env registered with id {env_id}")], "unknown_env")

    # ----- scored data -----

    async def post_groups(self, raw: bytes, as_list: bool, key: str | None = None) -> tuple[int, bool]:
        """Validate, reserve queue room, log durably; returns (groups accepted, whether ``key`` had
        already landed: then nothing is added and the first answer is repeated)."""
        raw = raw.strip()
        if key is None:
            return await self._post(raw, as_list, None), False
        if not KEY_PATTERN.fullmatch(key):
            raise GroupRejected(422, [{"loc": ["header", "idempotency-key"], "type": "value_error",
                                       "msg": "1 to 200 printable ASCII characters without spaces"}], "schema")
        digest = hashlib.blake2b(raw, digest_size=DIGEST_BYTES).digest()
        while (pending := self._pending_keys.get(key)) is not None:
            await asyncio.wait([pending])  # the original is being written: its outcome decides
        known = self.state.idempotency.get(key)
        if known is not None:
            if known[0] != digest:
                raise GroupRejected(422, [{"loc": ["header", "idempotency-key"], "type": "value_error",
                                           "msg": "this key was used for a different body"}], "key_reused")
            return known[1], True
        # A task of its own: a client that hangs up mid-write must not release the key before
        # the record is durable (its retry would land a second time).
        task = asyncio.get_running_loop().create_task(self._post(raw, as_list, (key, digest)))
        self._pending_keys[key] = task
        task.add_done_callback(lambda _: self._pending_keys.pop(key, None))
        return await asyncio.shield(task), False

    async def _post(self, raw: bytes, as_list: bool, keyed: tuple[str, bytes] | None) -> int:
        groups = self._validate(raw, as_list)
        sequences = sum(len(g.tokens) for g in groups)
        bound = self.settings.max_queue_sequences
        if sequences > bound:
            self._count_reject("too_large")
            raise GroupRejected(413, [error((), f"{sequences} sequences in one request exceed the queue bound {bound}; split it")], "too_large")
        state = self.state  # the in-flight count and the keys are the first queue's, shared by all
        if self.queued_sequences + state.inflight_sequences + sequences > bound:
            self._count_reject("queue_full")
            raise GroupRejected(503, [error((), f"queue full ({self.queued_sequences}/{bound} sequences); retry later")], "queue_full")
        first_id = max(s.next_group_id for s in self.states.values())
        for queue in self.states.values():
            queue.next_group_id = first_id + len(groups)
        state.inflight_sequences += sequences

        def apply() -> None:
            state.inflight_sequences -= sequences
            self._add_groups(first_id, groups, None if as_list else raw)
            if keyed is not None:
                state.remember(*keyed, len(groups))
            self.last_group = time.monotonic()
            self.last_groups.update(dict.fromkeys((g.policy or self.default for g in groups), self.last_group))
            for group in groups:
                if group.env_id is not None:
                    self.leases.posted(group.env_id)

        try:
            kind, payload = encode_groups(first_id, raw) if keyed is None else encode_keyed_groups(first_id, *keyed, raw)
            await self.wal.append(kind, payload, on_durable=apply)
        except OSError:
            state.inflight_sequences -= sequences
            raise
        return len(groups)

    def _validate(self, raw: bytes, as_list: bool) -> list[ScoredData]:
        try:
            groups = _group_list.validate_json(raw) if as_list else [ScoredData.model_validate_json(raw)]
        except ValidationError as exc:
            self._count_reject("schema")
            raise from_pydantic(exc) from None
        problems = []
        for index, group in enumerate(groups):
            loc: tuple[str | int, ...] = (index,) if as_list else ()
            queue = self.states.get(group.policy or self.default)
            if queue is None:
                problems.append(error((*loc, "policy"), f"policy {group.policy!r} is not one of this batcher's {list(self.states)}"))
                continue
            trainer = queue.trainer
            batch_size = trainer.batch_size if trainer else None
            problems += check_shapes(group, loc)
            problems += check_trials(group, loc) if not problems else []
            vocab = self.vocab_of(queue)
            if vocab is not None:
                problems += check_vocab(group, vocab, loc)
            size = len(group.tokens)
            if batch_size is not None and size > batch_size and trainer.batch_fill == "exact":  # type: ignore[union-attr]
                problems.append(error((*loc, "tokens"), f"group of {size} sequences can never fit a batch of {batch_size}"))
            if group.env_id is not None:
                if group.env_id >= len(self.state.envs):
                    problems.append(error((*loc, "env_id"), f"no env registered with id {group.env_id}"))
                elif group.policy is not None:  # one policy's share of a trial group: any of the trials took part
                    expected = self.state.envs[group.env_id].registration.group_size
                    if group.members > expected:
                        problems.append(error((*loc, "trials"), f"group has {group.members} members (trials), more than "
                                                                f"env {group.env_id}'s group_size {expected}"))
                else:
                    expected = self.state.envs[group.env_id].registration.group_size
                    if group.members != expected:
                        what = f"{group.members} members (trials)" if group.trials is not None else f"{size} sequences"
                        problems.append(error((*loc, "tokens"), f"group has {what}, env {group.env_id} registered group_size {expected}"))
        if problems:
            self._count_reject("invalid")
            raise GroupRejected(422, problems, "invalid")
        return groups

    @property
    def vocab_size(self) -> int | None:
        """The first policy's trainer's vocabulary when it said (rlstack's trainer does), else ``--vocab-size``."""
        return self.vocab_of(self.state)

    def vocab_of(self, state: BatcherState) -> int | None:
        trainer = state.trainer
        if trainer is not None and trainer.vocab_size is not None:
            return trainer.vocab_size
        return self.settings.vocab_size

    def _count_reject(self, reason: str) -> None:
        self.rejected[reason] += 1

    # ----- batches -----

    async def next_batch(self, saved_step: int | None = None, policy: str | None = None) -> bytes:
        """The next batch of ``policy``'s groups (the first's for none) as Atropos's JSON body
        (bytes, pre-serialised groups spliced in).

        ``saved_step``: the trainer's latest checkpoint, so the batches up to it are let go.
        """
        name = policy or self.default
        state = self.queue_of(name)
        wait = self.trainer_waits[name]
        if state.trainer is None:
            return orjson.dumps(NO_TRAINER)
        if saved_step is not None and any(step <= saved_step for step in state.served):
            # Not waited on: a lost record only keeps batches the trainer's next registration lets go.
            saved = StepsSaved(step=saved_step, policy=self._tag(name))
            state.apply(saved)
            self.wal.append_nowait(*encode_event(saved))
        for reason, ids in (("stale", state.stale_ids()), ("unbatchable", state.unbatchable_ids())):
            if ids:
                # Not waited on: a lost drop record is recomputed after a replay (ids are unique across queues).
                event = GroupsDropped(group_ids=ids, reason=reason)
                state.apply(event)
                self.wal.append_nowait(*encode_event(event))
        picked = state.reserve_batch()
        if picked is None:
            wait.empty()
            return b'{"batch":null}'
        wait.served()
        step, groups = picked
        event = BatchServed(step=step, group_ids=[g.group_id for g in groups], policy=self._tag(name))
        try:
            await self.wal.append(*encode_event(event), on_durable=lambda: state.apply(event))
        except OSError:
            state.release(step, groups)
            raise
        return b'{"batch":[' + b",".join(g.json() for g in groups) + b"]}"

    async def reset(self) -> None:
        await self._log_event(DataReset())
        self.leases.forget()

    # ----- liveness and progress -----

    def env_status(self, query: EnvStatusQuery) -> tuple[dict[str, Any], bool]:
        """Atropos's /status-env numbers for a polling env (the poll renews its lease), plus whether
        the trainer is waiting; and whether this poll brought back an env whose lease had expired."""
        self.require_env(query.env_id)
        revived = self.leases.touch(query.env_id, query.holding_back)
        live = self.leases.live_ids()
        status: dict[str, Any] = self.state.env_status(query.env_id, live)
        status["trainer_waiting"] = self.trainer_wait.seconds() is not None
        if len(self.states) > 1:
            status["policies"] = {policy: {**state.env_status(query.env_id, live), "trainer_waiting": self.trainer_waits[policy].seconds()
                                           is not None, "batch_size": state.trainer.batch_size if state.trainer else None,
                                           "trainer_done": state.trainer is not None and state.step >= state.trainer.num_steps}
                                  for policy, state in self.states.items()}
        return status, revived

    def progress(self, policy: str | None = None) -> ProgressReport:
        """``policy``'s trainer and queue (the first's for none); quiet means no group of that policy."""
        name = policy or self.default
        state = self.queue_of(name)
        last = self.last_groups.get(name)
        return progress_report(state, self.leases, self.trainer_waits[name], self.settings.stall_after_seconds,
                               last if last is not None else self.started, last is not None, name)

    async def _log_event(self, event) -> None:  # noqa: ANN001 - any Event model
        await self.wal.append(*encode_event(event), on_durable=lambda: self.apply(event))


def _parse_groups(raw: bytes) -> tuple[list[ScoredData], bytes | None]:
    if raw[:1] == b"[":
        return _group_list.validate_json(raw), None
    return [ScoredData.model_validate_json(raw)], raw
