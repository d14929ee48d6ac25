"""The ready replicas of each policy as the proxy last saw them: what routing decides with and what
the relay and the front layer ask about, so it sits below all three (``routing/`` fills it from the
registry; ``relay/`` and ``edge/`` only read it)."""

from __future__ import annotations

import hashlib

from rlstack.common.contracts.registry import Endpoint
from rlstack.common.policies import PolicyTable, single
from rlstack.proxy.names import relay_replica

MAX_DEPARTED = 1024


class ReplicaView:
    """The ready replicas of the run's policies as last seen, for routing decisions and the front layer.

    A replica's policy is the name it serves (``Endpoint.model``); the view holds those of every
    declared policy, and each question a call asks of it is asked of its own policy's replicas.
    """

    def __init__(self, policies: PolicyTable | str, default_context: int) -> None:
        self.table = single(policies) if isinstance(policies, str) else policies
        self.default_policy = self.table.names()[0]
        """The first policy (a one-policy run's only one): what a record names when nothing else does."""
        self.default_context = default_context
        self.endpoints: dict[str, Endpoint] = {}
        self.max_model_len: dict[str, int] = {}
        self.revision = -1
        self.departed: dict[str, str] = {}
        """Replicas that served and left, newest last, with their policy: their pinned groups keep a
        fallback (a call pinned just before its replica left, or retried after, goes to the policy's
        shared group, not 400)."""

    def set_endpoints(self, ready: dict[str, Endpoint]) -> None:
        for rid in self.endpoints.keys() - ready.keys():
            self.departed.pop(rid, None)
            self.departed[rid] = self.endpoints[rid].model
        for rid in ready:
            self.departed.pop(rid, None)
        while len(self.departed) > MAX_DEPARTED:
            del self.departed[next(iter(self.departed))]
        self.endpoints = ready

    def of(self, policy: str) -> dict[str, Endpoint]:
        """The policy's ready replicas."""
        return {rid: e for rid, e in self.endpoints.items() if e.model == policy}

    def urls(self, policy: str) -> list[str]:
        return [str(e.url).rstrip("/") for e in self.of(policy).values()]

    def context(self, policy: str) -> int:
        lengths = [self.max_model_len.get(i, self.default_context) for i in self.of(policy)]
        return min(lengths) if lengths else self.default_context

    def by_url(self, api_base: str | None) -> Endpoint | None:
        """The replica whose URL prefixes ``api_base`` (LiteLLM may report the full route)."""
        target = api_base or ""
        relayed = relay_replica(target)  # token-in's relay: .../replicas/<replica id>/v1
        if relayed is not None:
            return self.endpoints.get(relayed)
        for e in self.endpoints.values():
            if target.startswith(str(e.url).rstrip("/")):
                return e
        return None

    def sticky_replica(self, key: str, policy: str | None = None) -> str | None:
        """Rendezvous hashing over the policy's replicas: a trial keeps its replica of each policy
        while it lives; losing one moves only its trials."""
        candidates = self.of(policy) if policy is not None else self.endpoints
        if not candidates:
            return None
        return max(candidates, key=lambda rid: hashlib.blake2b(f"{key}|{rid}".encode(), digest_size=8).digest())

    def pinned_group(self, replica_id: str) -> str:
        endpoint = self.endpoints.get(replica_id)
        policy = endpoint.model if endpoint is not None else self.departed.get(replica_id, self.default_policy)
        return f"{policy}@{replica_id}"
