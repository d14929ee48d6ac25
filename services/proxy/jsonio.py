"""JSON bytes in and out on the proxy's hot path (orjson), shared by the relay and the edge."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(payload: bytes) -> Any:
    """orjson, or the stdlib for text holding lone surrogates (a model may emit half a
    UTF-8 character; upstream JSON carries it as a \\udXXX escape, which orjson refuses)."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return json.loads(payload)


def dumps(data: Any) -> bytes:
    try:
        return orjson.dumps(data)
    except TypeError:
        return json.dumps(data, separators=(",", ":")).encode()
