"""What the write-ahead log holds: state events as JSON, and accepted groups as raw request bytes.

Groups are logged as the bytes the client sent (after gzip inflation), prefixed by the id of
the first group: no re-serialisation on the hot path, and a replay validates them again.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

from rlstack.common.contracts.atropos import EnvRegistration, TrainerRegistration

_first_id = struct.Struct("<Q")
_key_len = struct.Struct("<H")
DIGEST_BYTES = 16


class RecordKind(IntEnum):
    EVENT = 1
    GROUPS = 2
    KEYED_GROUPS = 3
    """Groups posted with an ``Idempotency-Key``: the key and the body's digest precede the JSON."""


class TrainerRegistered(BaseModel):
    kind: Literal["trainer"] = "trainer"
    registration: TrainerRegistration


class EnvRegistered(BaseModel):
    kind: Literal["env"] = "env"
    env_id: int
    real_name: str
    registration: EnvRegistration


class EnvDisconnected(BaseModel):
    kind: Literal["disconnect"] = "disconnect"
    env_id: int


class BatchServed(BaseModel):
    kind: Literal["batch"] = "batch"
    step: int
    group_ids: list[int]
    policy: str | None = None
    """The policy whose trainer took it (None: the first; every record written before policies)."""


class StepsSaved(BaseModel):
    """The trainer's checkpoint holds every step up to ``step``: its batches need not be served again."""

    kind: Literal["saved"] = "saved"
    step: int
    policy: str | None = None


class GroupsDropped(BaseModel):
    kind: Literal["dropped"] = "dropped"
    group_ids: list[int]
    reason: Literal["stale", "unbatchable"]


class Snapshot(BaseModel):
    """Written last by compaction: counters that no longer follow from the records."""

    kind: Literal["snapshot"] = "snapshot"
    step: int
    next_group_id: int
    replay: list[int] = []
    """Served steps still to be served again to a resumed trainer."""
    policy: str | None = None


class DataReset(BaseModel):
    kind: Literal["reset"] = "reset"


class IdempotencyKeys(BaseModel):
    """Written by compaction: the posts remembered by key, so a retry after a rewrite still lands once."""

    kind: Literal["keys"] = "keys"
    entries: list[tuple[str, str, int]]
    """(key, body digest in hex, groups accepted), oldest first."""


Event = Annotated[
    TrainerRegistered | EnvRegistered | EnvDisconnected | BatchServed | StepsSaved | GroupsDropped | Snapshot | DataReset
    | IdempotencyKeys,
    Field(discriminator="kind"),
]
event_adapter: TypeAdapter[Event] = TypeAdapter(Event)


def encode_event(event: BaseModel) -> tuple[int, bytes]:
    return RecordKind.EVENT, event.model_dump_json().encode()


def encode_groups(first_id: int, raw_json: bytes) -> tuple[int, bytes]:
    return RecordKind.GROUPS, _first_id.pack(first_id) + raw_json


def decode_groups(payload: bytes) -> tuple[int, bytes]:
    (first_id,) = _first_id.unpack_from(payload)
    return first_id, payload[_first_id.size :]


def encode_keyed_groups(first_id: int, key: str, digest: bytes, raw_json: bytes) -> tuple[int, bytes]:
    encoded = key.encode()
    return RecordKind.KEYED_GROUPS, _first_id.pack(first_id) + _key_len.pack(len(encoded)) + encoded + digest + raw_json


def decode_keyed_groups(payload: bytes) -> tuple[int, str, bytes, bytes]:
    """(first group id, key, body digest, the groups' JSON)."""
    (first_id,) = _first_id.unpack_from(payload)
    (length,) = _key_len.unpack_from(payload, _first_id.size)
    start = _first_id.size + _key_len.size
    key = payload[start : start + length].decode()
    digest = payload[start + length : start + length + DIGEST_BYTES]
    return first_id, key, digest, payload[start + length + DIGEST_BYTES :]
