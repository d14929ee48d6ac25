"""``POST <proxy>/trials/<run>/<trial>/end``: the env says a trial is over and gets back every call logged.

A trial ends when its agent has exited, so every call it made has had its answer; what may still
be in flight is the proxy's own logging of the last ones. The proxy waits for those, flushes
its writer, forgets the trial's threads and answers the records: no settle delay on either side.
With several proxy pods the one that takes the end also passes it on to the others before it reads
the files (``?scope=process``: the same wait, flush and forgetting, no records), since a trial's calls
may have gone to any of them.

The route takes an *end token*, an HMAC of the trial under the proxy's trial-key secret, which
the env server can compute and the agent (holding only its trial key) cannot: an agent cannot
end its own trial early or read its records back through the proxy.
"""

from __future__ import annotations

import hashlib
import hmac

from pydantic import BaseModel, Field

from rlstack.common.contracts.trajectory import TrajectoryRecord

OPEN_END_TOKEN = "open"
"""What both sides use when the proxy has no trial-key secret (open local mode)."""


def end_token(secret: str | None, run: str, trial: str) -> str:
    if secret is None:
        return OPEN_END_TOKEN
    return hmac.new(secret.encode(), f"end:{run}/{trial}".encode(), hashlib.sha256).hexdigest()


def end_token_ok(secret: str | None, run: str, trial: str, presented: str) -> bool:
    return hmac.compare_digest(end_token(secret, run, trial), presented)


class TrialEnd(BaseModel):
    run: str
    trial: str
    records: list[TrajectoryRecord] = Field(default_factory=list)
    """Every call of the trial that any proxy process logged, in the order they started."""
    in_flight: int = 0
    """Calls of this trial still being logged when the wait ran out, here or in a peer (0 = complete)."""
    unreached: list[str] = Field(default_factory=list)
    """Peer proxies that did not take the end: calls they served may be missing (a pod that died) or late."""
