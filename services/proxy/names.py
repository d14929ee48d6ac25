"""Names the proxy's layers agree on: the headers a call carries between them, and the relay's path."""

TRIAL_HEADER = "x-rlstack-trial"
"""``<run>/<trial>``: set by the edge from the call's path (a client's own is dropped), read by the
key check, and forwarded by the routing hook to the relay."""
REQUESTED_MODEL_HEADER = "x-rlstack-requested-model"
"""The model name the agent asked for (before the edge maps it onto the served one), for its record."""
POLICY_HEADER = "x-rlstack-policy"
"""The policy the edge routed the call to (a client's own is dropped), for the relay's check and threads."""
STREAMED_HEADER = "x-rlstack-streamed"
"""Set by the edge when the agent asked for an event stream (the edge streams the whole reply), for its record."""
CALL_HEADER = "x-rlstack-call"
"""The call's id, from the routing hook to the relay, so the relay's outcome finds its record."""
RELAY_PREFIX = "/replicas"
"""Token-in's loopback URLs: ``<relay>/replicas/<replica id>/v1``, one LiteLLM deployment per replica."""


def relay_replica(url: str) -> str | None:
    """The replica id in a relay URL (``.../replicas/<id>/v1...``), None for any other URL."""
    marker = RELAY_PREFIX + "/"
    if marker not in url:
        return None
    return url.split(marker, 1)[1].split("/", 1)[0]
