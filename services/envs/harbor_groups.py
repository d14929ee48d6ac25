"""A trial's outcome as the agent env judges it (scored or not, and why), and a group's rows."""

from __future__ import annotations

from rlstack.episodes.assemble import Assembly
from rlstack.episodes.trials.records import TrialResult, TrialStatus


class TrialOutcome:
    def __init__(self, result: TrialResult, assembly: Assembly | None, token_limit: int) -> None:
        self.result, self.assembly, self.token_limit = result, assembly, token_limit

    @property
    def too_long(self) -> bool:
        return self.assembly is not None and any(len(s.tokens) > self.token_limit for s in self.assembly.sequences)

    @property
    def scored(self) -> bool:
        """Only a finished trial whose every call is trainable counts: anything else is not a wrong answer."""
        return (self.result.status == TrialStatus.OK and self.assembly is not None and self.assembly.failed_calls == 0
                and bool(self.assembly.sequences) and not self.too_long)


def why_unscored(outcome: TrialOutcome) -> str:
    if outcome.assembly is None:
        return "no model call reached the proxy"
    if outcome.assembly.failed_calls:
        return f"{outcome.assembly.failed_calls} failed model call(s)"
    if outcome.too_long:
        return f"a sequence is longer than the {outcome.token_limit}-token limit"
    return "no trained tokens"


ROLE_REWARD = "reward@{policy}"
"""A verifier's ``reward.json`` key for one policy's own reward (``{"reward": 1, "reward@helper": 0.5}``);
a policy without one gets the trial's reward."""


def policy_reward(result: TrialResult, policy: str | None) -> float:
    """The reward a policy's rows of the trial get: its role's own, where the verifier wrote one."""
    assert result.reward is not None
    named = (result.verifier.rewards or {}).get(ROLE_REWARD.format(policy=policy)) if policy is not None else None
    return result.reward if named is None else named


def trial_group(outcomes: list[TrialOutcome], every_sequence: bool, env_id: int | None,
                policy: str | None = None) -> tuple[dict, int]:
    """The Atropos group body of scored trials, and how many of their sequences were left out.

    Each trial's main thread comes first (the longest, for a trial whose first thread it is not);
    with ``every_sequence`` its side calls, sub-agent threads and segments follow, rows of the
    same member (``trials``), each with the trial's reward. With ``policy``, only that policy's
    sequences, each trial that has any a member (numbered in order), with ``policy_reward``.
    """
    tokens, masks, logprobs, scores, members = [], [], [], [], []
    versions: list[list[int] | None] = []
    left_out = member = 0
    for outcome in outcomes:
        assert outcome.assembly is not None and outcome.result.reward is not None
        own = outcome.assembly.sequences if policy is None else outcome.assembly.by_policy().get(policy, [])
        if not own:
            continue
        main, *side = sorted(own, key=lambda s: (s.kind == "main", s.trained_tokens), reverse=True)
        posted = [main, *side] if every_sequence else [main]
        left_out += 1 + len(side) - len(posted)
        for sequence in posted:
            tokens.append(sequence.tokens)
            masks.append(sequence.masks)
            logprobs.append(sequence.inference_logprobs)
            scores.append(policy_reward(outcome.result, policy))
            versions.append(sequence.sampling_versions)
            members.append(member)
        member += 1
    group: dict = {"tokens": tokens, "masks": masks, "scores": scores, "inference_logprobs": logprobs, "env_id": env_id}
    if len(members) > member:
        group["trials"] = members  # a trial's side calls, sub-agents and segments: rows of one member
    if versions and all(v is not None for v in versions):
        group["sampling_versions"] = versions  # per row, the versions the replicas say sampled it
        group["weight_version"] = min(v[0] for v in versions)  # type: ignore[index]  # the oldest any row saw
    elif known := [v for row in versions if row for v in row]:
        group["weight_version"] = min(known)  # some calls' versions unknown: no per-row claim
    return group, left_out
