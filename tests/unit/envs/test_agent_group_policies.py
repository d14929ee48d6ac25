"""A group's rows per policy (issue 53): each policy's group holds exactly its own sequences of the
group's trials, every sequence lands in one policy's group and in no other, a verifier may reward
a role apart, and with no policy named the group is what it always was."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rlstack.envs.agent_group import TrialOutcome, trial_group
from rlstack.episodes.assemble import AssembledSequence, Assembly
from rlstack.episodes.trials.records import (
    AgentRecord,
    TaskRecord,
    TrialResult,
    TrialStatus,
    VerifierRecord,
)

MASK = -100


def sequence(first: int, policy: str | None, kind: str = "main", version: int = 3) -> AssembledSequence:
    return AssembledSequence(tokens=[1, first, first + 1], masks=[MASK, first, first + 1], inference_logprobs=[0.0, -0.1, -0.2],
                             calls=1, kind=kind, weight_versions=[version], policy=policy)  # type: ignore[arg-type]


def outcome(reward: float, *sequences: AssembledSequence, rewards: dict[str, float] | None = None) -> TrialOutcome:
    now = datetime.now(UTC)
    result = TrialResult(run="r", trial="t", attempt=1, sandbox="unused", task=TaskRecord(name="x", path=Path("/x"),
                         schema_version="1.1"), agent=AgentRecord(name="a", command=["a"]),
                         verifier=VerifierRecord(rewards=rewards), status=TrialStatus.OK, reward=reward,
                         started_at=now, finished_at=now)
    return TrialOutcome(result, Assembly(sequences=list(sequences), calls=len(sequences), merged_calls=0, thread_breaks=0,
                                         failed_calls=0), token_limit=4096)


def team() -> list[TrialOutcome]:
    """Three trials: the lead delegated in the first and last, never in the second."""
    return [outcome(1.0, sequence(10, "lead"), sequence(20, "helper", "sub_agent"), sequence(30, "helper", "sub_agent")),
            outcome(0.0, sequence(40, "lead")),
            outcome(1.0, sequence(50, "lead"), sequence(60, "helper", "sub_agent"),
                    rewards={"reward": 1.0, "reward@helper": 0.25})]


def test_each_policys_group_holds_exactly_its_own_rows():
    lead, _ = trial_group(team(), True, 0, policy="lead")
    helper, _ = trial_group(team(), True, 0, policy="helper")
    assert [t[1] for t in lead["tokens"]] == [10, 40, 50] and "trials" not in lead  # one row per member
    assert [t[1] for t in helper["tokens"]] == [20, 30, 60]
    assert helper["trials"] == [0, 0, 1]  # the trials the helper took part in, numbered again
    every = trial_group(team(), True, 0)[0]["tokens"]
    assert sorted(lead["tokens"] + helper["tokens"]) == sorted(every)  # each row in one policy's group, none lost


def test_a_verifier_may_reward_a_role_apart():
    lead, _ = trial_group(team(), True, 0, policy="lead")
    helper, _ = trial_group(team(), True, 0, policy="helper")
    assert lead["scores"] == [1.0, 0.0, 1.0]
    assert helper["scores"] == [1.0, 1.0, 0.25]  # reward@helper in the third trial's reward.json


def test_with_no_policy_named_the_group_is_what_it_always_was():
    group, left_out = trial_group(team(), True, 7)
    assert group == {
        "tokens": [[1, 10, 11], [1, 20, 21], [1, 30, 31], [1, 40, 41], [1, 50, 51], [1, 60, 61]],
        "masks": [[MASK, 10, 11], [MASK, 20, 21], [MASK, 30, 31], [MASK, 40, 41], [MASK, 50, 51], [MASK, 60, 61]],
        "scores": [1.0, 1.0, 1.0, 0.0, 1.0, 1.0], "inference_logprobs": [[0.0, -0.1, -0.2]] * 6, "env_id": 7,
        "trials": [0, 0, 0, 1, 2, 2], "sampling_versions": [[3]] * 6, "weight_version": 3}
    assert left_out == 0
    main_only, left_out = trial_group(team(), False, 7)
    assert [t[1] for t in main_only["tokens"]] == [10, 40, 50] and left_out == 3
