"""Trial keys: HMAC-signed tokens naming a run and a trial, so the proxy needs no database.

Format: ``rlst_<payload>.<signature>``, both base64url; the payload is JSON
``{"r": run, "t": trial, "e": expiry}``. Anyone with the secret can mint keys (the env server
that starts a sandbox does); the proxy only verifies. A key lives as long as its trial (the env
mints it with the agent's timeout, its sandbox's start allowance and ``KEY_MARGIN_SECONDS``): one an agent leaks or keeps is
worthless soon after.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time

import orjson
from pydantic import BaseModel, Field

from rlstack.common.names import ID_BODY, ID_PATTERN

NAME = ID_PATTERN
PREFIX = "rlst_"


class TrialIdentity(BaseModel):
    run: str = Field(pattern=NAME)
    trial: str = Field(pattern=NAME)


class InvalidTrialKey(ValueError):
    pass


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


DEFAULT_TTL_SECONDS = 900.0
"""A key minted without a lifetime: one request or a short trial, not days."""
KEY_MARGIN_SECONDS = 120.0
"""Past the agent's timeout: the trial's last call may still be in flight when it is killed."""


def mint(secret: str, run: str, trial: str, ttl_seconds: float = DEFAULT_TTL_SECONDS, now: float | None = None) -> str:
    if not ttl_seconds > 0 or ttl_seconds == float("inf"):
        raise ValueError(f"ttl_seconds must be a positive finite number, got {ttl_seconds!r}")
    identity = TrialIdentity(run=run, trial=trial)
    expiry = int((now if now is not None else time.time()) + ttl_seconds)
    payload = _b64(orjson.dumps({"r": identity.run, "t": identity.trial, "e": expiry}))
    return f"{PREFIX}{payload}.{_sign(secret, payload)}"


def verify(secret: str, key: str, now: float | None = None) -> TrialIdentity:
    if not key.isascii() or not key.startswith(PREFIX) or key.count(".") != 1:  # compare_digest raises on non-ASCII
        raise InvalidTrialKey("not a trial key")
    payload, signature = key[len(PREFIX):].split(".")
    if not hmac.compare_digest(signature, _sign(secret, payload)):
        raise InvalidTrialKey("bad signature")
    try:
        claims = orjson.loads(_unb64(payload))
        identity = TrialIdentity(run=claims["r"], trial=claims["t"])
        expiry = float(claims["e"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidTrialKey("malformed payload") from exc
    if expiry < (now if now is not None else time.time()):
        raise InvalidTrialKey("expired")
    return identity


TRIAL_PATH = re.compile(rf"^/trials/(?P<run>{ID_BODY})/(?P<trial>{ID_BODY})(?P<rest>/.*)$")


def agent_env(proxy_url: str, run: str, trial: str, trial_key: str) -> dict[str, str]:
    """What points an agent at the proxy as this trial: both API dialects, path prefix and key.

    The key is a short-lived trial key (HMAC over run/trial/expiry), not the proxy's secret,
    so it may sit in the pod spec.
    """
    base = f"{proxy_url.rstrip('/')}/trials/{run}/{trial}"
    return {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": trial_key,
            "OPENAI_BASE_URL": f"{base}/v1", "OPENAI_API_KEY": trial_key,
            "RLSTACK_RUN": run, "RLSTACK_TRIAL": trial}
