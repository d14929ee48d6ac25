"""Which weight version an env reads from the registry: one rule, for the label a group carries
and for the staleness gate, always over the replicas of the env's own served model.

A registry may list replicas of other models (a second policy, an evaluator); their versions
count in another run, not this one. Filtering on the model name is the registry's
``GET /v1/endpoints?model=`` too; these functions hold the rest of the rule, so no reader picks
its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from rlstack.common.contracts.registry import Endpoint


def serves(endpoint: Endpoint, served_model_name: str) -> bool:
    """The registry's ``?model=`` filter and the proxy's routing filter too."""
    return endpoint.model == served_model_name


def sampling_version(endpoints: Iterable[Endpoint], served_model_name: str) -> int | None:
    """The oldest version any ready replica of the model holds: the oldest weights that may answer
    a call made now (what a group is labelled with). None when none is ready."""
    return min((e.weight_version for e in endpoints if e.ready and serves(e, served_model_name)), default=None)


def policy_version(endpoints: Iterable[Endpoint], served_model_name: str) -> int:
    """The newest version any replica of the model holds, ready or not: how far the trainer has got
    (what the staleness gate counts from; a lagging replica must not hold every env back)."""
    return max((e.weight_version for e in endpoints if serves(e, served_model_name)), default=0)
