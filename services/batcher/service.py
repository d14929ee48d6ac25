"""The batcher's use cases: validate, log durably, apply; hand out batches; replay on start.

Sits between the HTTP routes (api.py) and the state machine (state.py); owns the write-ahead
log and decides what is rejected (422), throttled (503) or accepted.
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
    GroupsDropped,
    RecordKind,
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
        self.state = BatcherState(max_staleness=settings.max_staleness)
        self.wal = wal
        self.rejected: dict[str, int] = dict.fromkeys(REJECT_REASONS, 0)
        """Every reason from the start, so /metrics shows 0 rather than no series."""
        self._pending_keys: dict[str, asyncio.Task[int]] = {}
        """Keyed posts being written now: a retry racing its original waits for it."""
        self.leases = EnvLeases(settings.env_lease_seconds)
        self.trainer_wait = TrainerWait(settings.trainer_poll_window_seconds)
        self.stall = StallWatch()
        self.started = time.monotonic()
        self.last_group: float | None = None
        """When a group was last accepted (monotonic)."""

    # ----- lifecycle -----

    def replay(self) -> int:
        """Rebuild the state from the log; returns the number of records read."""
        count = 0
        for kind, payload in self.wal.open():
            count += 1
            if kind == RecordKind.EVENT:
                self.state.apply(event_adapter.validate_json(payload))
            elif kind == RecordKind.GROUPS:
                first_id, raw = decode_groups(payload)
                groups, single = _parse_groups(raw)
                self.state.add_groups(first_id, groups, single)
            elif kind == RecordKind.KEYED_GROUPS:
                first_id, key, digest, raw = decode_keyed_groups(payload)
                groups, single = _parse_groups(raw)
                self.state.add_groups(first_id, groups, single)
                self.state.remember(key, digest, len(groups))
        self.leases.adopt(e.env_id for e in self.state.envs if e.connected)
        log.info(
            "replayed %d records: step %d, %d groups queued, %d envs",
            count, self.state.step, len(self.state.queue), len(self.state.envs),
        )
        return count

    async def maybe_compact(self) -> bool:
        """Rewrite the log as a snapshot once it is large and mostly consumed."""
        live_bytes = self.state.queued_sequences * 4096  # rough upper bound per sequence
        if self.wal.size < self.settings.compact_min_bytes or self.wal.size < 2 * live_bytes:
            return False
        await self.wal.rewrite(self._snapshot_records)
        return True

    def _snapshot_records(self) -> list[tuple[int, bytes]]:
        records = [encode_event(e) for e in self.state.snapshot_events()]
        served = (g for batch in self.state.served.values() for g in batch)
        for group in [*self.state.queue.values(), *served]:
            records.append(encode_groups(group.group_id, group.data.model_dump_json().encode()))
        return records + [encode_event(e) for e in self.state.snapshot_tail()]

    # ----- registration -----

    async def register_trainer(self, registration: TrainerRegistration) -> dict[str, int]:
        if registration.batch_size > self.settings.max_queue_sequences:
            raise GroupRejected(
                422, [error(("batch_size",), f"exceeds the queue bound ({self.settings.max_queue_sequences} sequences)")],
                "batch_size",
            )
        await self._log_event(TrainerRegistered(registration=registration))
        return {"uuid": self.state.requesters}

    async def register_env(self, registration: EnvRegistration) -> dict[str, Any]:
        trainer = self.state.trainer
        if trainer is None:
            return {"status": "wait for trainer to start"}
        if registration.group_size > trainer.batch_size:
            raise GroupRejected(
                422, [error(("group_size",), f"{registration.group_size} exceeds the trainer's batch_size {trainer.batch_size}")],
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
        state = self.state
        if state.queued_sequences + state.inflight_sequences + sequences > bound:
            self._count_reject("queue_full")
            raise GroupRejected(503, [error((), f"queue full ({state.queued_sequences}/{bound} sequences); retry later")], "queue_full")
        first_id = state.allocate_ids(len(groups))
        state.inflight_sequences += sequences

        def apply() -> None:
            state.inflight_sequences -= sequences
            state.add_groups(first_id, groups, None if as_list else raw)
            if keyed is not None:
                state.remember(*keyed, len(groups))
            self.last_group = time.monotonic()
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
        batch_size = self.state.trainer.batch_size if self.state.trainer else None
        vocab = self.vocab_size
        for index, group in enumerate(groups):
            loc: tuple[str | int, ...] = (index,) if as_list else ()
            problems += check_shapes(group, loc)
            problems += check_trials(group, loc) if not problems else []
            if vocab is not None:
                problems += check_vocab(group, vocab, loc)
            size = len(group.tokens)
            if batch_size is not None and size > batch_size and self.state.trainer.batch_fill == "exact":
                problems.append(error((*loc, "tokens"), f"group of {size} sequences can never fit a batch of {batch_size}"))
            if group.env_id is not None:
                if group.env_id >= len(self.state.envs):
                    problems.append(error((*loc, "env_id"), f"no env registered with id {group.env_id}"))
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
        """The trainer's vocabulary when it said (rlstack's trainer does), else ``--vocab-size``."""
        trainer = self.state.trainer
        if trainer is not None and trainer.vocab_size is not None:
            return trainer.vocab_size
        return self.settings.vocab_size

    def _count_reject(self, reason: str) -> None:
        self.rejected[reason] += 1

    # ----- batches -----

    async def next_batch(self, saved_step: int | None = None) -> bytes:
        """The next batch as Atropos's JSON body (bytes, pre-serialised groups spliced in).

        ``saved_step``: the trainer's latest checkpoint, so the batches up to it are let go.
        """
        state = self.state
        if state.trainer is None:
            return orjson.dumps(NO_TRAINER)
        if saved_step is not None and any(step <= saved_step for step in state.served):
            # Not waited on: a lost record only keeps batches the trainer's next registration lets go.
            saved = StepsSaved(step=saved_step)
            state.apply(saved)
            self.wal.append_nowait(*encode_event(saved))
        for reason, ids in (("stale", state.stale_ids()), ("unbatchable", state.unbatchable_ids())):
            if ids:
                # Not waited on: a lost drop record is recomputed after a replay.
                event = GroupsDropped(group_ids=ids, reason=reason)
                state.apply(event)
                self.wal.append_nowait(*encode_event(event))
        picked = state.reserve_batch()
        if picked is None:
            self.trainer_wait.empty()
            return b'{"batch":null}'
        self.trainer_wait.served()
        step, groups = picked
        event = BatchServed(step=step, group_ids=[g.group_id for g in groups])
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
        status = self.state.env_status(query.env_id, self.leases.live_ids())
        status["trainer_waiting"] = self.trainer_wait.seconds() is not None
        return status, revived

    def progress(self) -> ProgressReport:
        quiet_since = self.last_group if self.last_group is not None else self.started
        return progress_report(self.state, self.leases, self.trainer_wait, self.settings.stall_after_seconds,
                               quiet_since, self.last_group is not None)

    async def _log_event(self, event) -> None:  # noqa: ANN001 - any Event model
        await self.wal.append(*encode_event(event), on_durable=lambda: self.state.apply(event))


def _parse_groups(raw: bytes) -> tuple[list[ScoredData], bytes | None]:
    if raw[:1] == b"[":
        return _group_list.validate_json(raw), None
    return [ScoredData.model_validate_json(raw)], raw
