"""Turning a vLLM completion into an Atropos scored group, from vLLM's own token ids.

tokens = prompt ids + completion ids, masks = -100 over the prompt and the completion ids
after it, inference logprobs = 0 over the prompt (never trained) and vLLM's per-token
logprobs after it, and per row the weight versions that sampled it, as the replica reported them.
Nothing is re-tokenised: text only goes to the reward function.
"""

from __future__ import annotations

from typing import Any

from rlstack.common.contracts.atropos import MASKED


class RolloutError(ValueError):
    """The completion lacks the ids or logprobs a group needs (a proxy or vLLM misconfiguration)."""


def completion_parts(choice: dict[str, Any]) -> tuple[list[int], list[float], str]:
    extra = choice.get("provider_specific_fields") or {}
    ids = choice.get("token_ids") or extra.get("token_ids")
    content = (choice.get("logprobs") or {}).get("content")
    if not ids or content is None:
        raise RolloutError("completion without token_ids/logprobs: is return_token_ids reaching vLLM?")
    logprobs = [float(t["logprob"]) for t in content]
    if len(logprobs) != len(ids):
        raise RolloutError(f"{len(ids)} token ids but {len(logprobs)} logprobs")
    return list(ids), logprobs, (choice.get("message") or {}).get("content") or ""


def sampling_versions(response: dict[str, Any]) -> list[list[int]] | None:
    """Per choice, the weight versions the replica says sampled it (the proxy's relay puts them on
    each choice; LiteLLM may move them under ``provider_specific_fields``). None unless every choice has them."""
    found = []
    for choice in sorted(response["choices"], key=lambda c: c.get("index", 0)):
        versions = choice.get("weight_versions") or (choice.get("provider_specific_fields") or {}).get("weight_versions")
        if not versions:
            return None
        found.append(sorted(set(versions)))
    return found


def build_group(response: dict[str, Any], scores: list[float], weight_version: int | None = None) -> dict[str, Any]:
    """``weight_version``: the label for a response whose choices carry no versions (a proxy without its relay)."""
    prompt = response.get("prompt_token_ids")
    if not prompt:
        raise RolloutError("response without prompt_token_ids")
    tokens, masks, logprobs = [], [], []
    for choice in sorted(response["choices"], key=lambda c: c.get("index", 0)):
        ids, lps, _ = completion_parts(choice)
        tokens.append(list(prompt) + ids)
        masks.append([MASKED] * len(prompt) + ids)
        logprobs.append([0.0] * len(prompt) + lps)
    group: dict[str, Any] = {"tokens": tokens, "masks": masks, "scores": scores, "inference_logprobs": logprobs}
    versions = sampling_versions(response)
    if versions is not None:
        group["sampling_versions"] = versions
        group["weight_version"] = min(row[0] for row in versions)
    elif weight_version is not None:
        group["weight_version"] = weight_version
    return group
