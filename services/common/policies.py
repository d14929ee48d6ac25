"""A run's policies, and which of the model names agents ask for each one answers.

A policy's name is the name its replicas serve it under (vLLM's ``--served-model-name``): replicas
register under it, a trainer syncs the replicas of its name, and the weight-version helpers
(``weight_versions``) filter on it, so a second policy needs no second identifier. What a table
adds is the agent's side: the names an agent asks for (``claude-haiku-4-5``, ``gpt-5``) and the
policy that answers each. With no table a run has one policy, ``single(name)``, answering every
name the proxy has always mapped onto the policy.

Claims never overlap: a name two policies could answer is refused when the table is made, naming
both, so no call is ever answered by the other policy's weights (docs/policies.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from rlstack.common.model_families import ModelFamily, ModelFamilyError, family_of, get_family
from rlstack.common.names import POLICY_NAME

Dialect = Literal["chat", "messages", "count_tokens", "responses"]
"""The proxy's kinds of model call (``proxy.edge.front``)."""

PROVIDER_PREFIXES = ("anthropic/", "openai/")
"""What LiteLLM-style clients may put before a name (``anthropic/claude-sonnet-4-5``); not part of the claim."""
HOSTED_PREFIX = "hosted_vllm/"
REST = re.compile(r"[A-Za-z0-9._-]*")
"""What a ``prefix*`` claim's ``*`` stands for: the rest of a model name, no spaces or slashes."""


def _matches(claim: str, name: str) -> bool:
    if claim.endswith("*"):
        return name.startswith(claim[:-1]) and REST.fullmatch(name, len(claim) - 1) is not None
    return name == claim


def _overlap(a: str, b: str) -> bool:
    """Whether one name could be claimed by both (exact or ``prefix*`` patterns)."""
    if a.endswith("*") and b.endswith("*"):
        return a[:-1].startswith(b[:-1]) or b[:-1].startswith(a[:-1])
    if a.endswith("*"):
        return _matches(a, b)
    return _matches(b, a)


class PolicyRoute(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=POLICY_NAME)
    """The served name of the policy's replicas; always claimed, as is ``hosted_vllm/<name>``."""
    served_names: tuple[str, ...] = ()
    """Names agents ask for that this policy answers in every dialect: exact, or a prefix ending in
    ``*`` (``claude-haiku-*``)."""
    responses_names: tuple[str, ...] = ()
    """Names it answers on the Responses dialect only (codex asks for ``gpt-*`` by default)."""

    def claims(self, kind: Dialect) -> tuple[str, ...]:
        extra = self.responses_names if kind == "responses" else ()
        return (self.name, *self.served_names, *extra)


class PolicyTable(RootModel[tuple[PolicyRoute, ...]]):
    """Every policy of a run, in the order declared."""

    @model_validator(mode="after")
    def _one_answer_per_name(self) -> PolicyTable:
        routes = self.root
        if not routes:
            raise ValueError("policies: at least one policy")
        names = [r.name for r in routes]
        if len(set(names)) < len(names):
            raise ValueError(f"policies: each name once (got {names})")
        for i, a in enumerate(routes):
            for b in routes[i + 1:]:  # the Responses claims are a superset of every other dialect's
                for x in a.claims("responses"):
                    for y in b.claims("responses"):
                        if _overlap(x, y):
                            raise ValueError(f"policies: {a.name!r} claims {x!r} and {b.name!r} claims {y!r}: a name "
                                             "both match would have two policies to answer it")
        return self

    def names(self) -> list[str]:
        return [r.name for r in self.root]

    def route(self, model: str, kind: Dialect) -> str | None:
        """The policy that answers ``model`` in this dialect; None when none does (a 404 for the agent)."""
        for r in self.root:
            if model in (r.name, HOSTED_PREFIX + r.name):
                return r.name
        bare = next((model.removeprefix(p) for p in PROVIDER_PREFIXES if model.startswith(p)), model)
        for r in self.root:
            if any(_matches(claim, bare) for claim in r.claims(kind)[1:]):
                return r.name
        return None

    def served(self, kind: Dialect) -> dict[str, list[str]]:
        """Each policy's claims in this dialect: what a 404 lists."""
        return {r.name: list(r.claims(kind)) for r in self.root}


OPENAI_DEFAULTS = ("gpt-*", "codex-*", *(f"o{d}*" for d in range(10)))
"""The OpenAI names a Responses client asks for by default (``o1``, ``o3-mini``...)."""


def single(served_model_name: str) -> PolicyTable:
    """A run of one policy: it answers its own name, every ``claude-*``, and on the Responses dialect
    the OpenAI names codex asks for, as the proxy always has."""
    return PolicyTable((PolicyRoute(name=served_model_name, served_names=("claude-*",), responses_names=OPENAI_DEFAULTS),))


def declared_family(policy: str, model_dir: Path | str, family: str | None) -> ModelFamily:
    """A policy's family: the one it declares, unless its model directory says another (a policy
    trained on one template and served with another would learn from ids it never sampled); the
    directory's own when none is declared. Raises naming the policy, the directory and both."""
    if family is None:
        return family_of(model_dir)
    declared = get_family(family)
    try:
        told = family_of(model_dir)
    except ModelFamilyError:  # a directory that cannot say: the declaration is what there is
        return declared
    if told.name != declared.name:
        raise ModelFamilyError(f"policy {policy!r}: declares model family {family!r}, but {model_dir} is "
                               f"{told.name!r}; fix the declaration or the model directory")
    return declared
