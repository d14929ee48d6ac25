"""A group's rows per policy (issue 53): each policy's group holds exactly its own sequences of the
group's trials, every sequence lands in one policy's group and in no other, a verifier may reward
a role apart, and with no policy named the group is what it always was."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rlstack.envs.harbor_groups import TrialOutcome, trial_group
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


LEAD_HELPER = [{"name": "lead", "served_names": ["claude-sonnet-*"]}, {"name": "helper", "served_names": ["claude-haiku-*"]}]


def test_the_env_posts_one_tagged_group_per_policy_that_took_part_twice():
    import pytest

    from rlstack.envs.harbor_runner import GroupDropped
    from rlstack.episodes.harbor import HarborTask
    from tests.conftest import REPO
    from tests.unit.envs.test_agent_trials import runner

    env = runner(policies=LEAD_HELPER)
    env.batch_fill = "at_least"
    task = HarborTask.load(next(p for p in sorted((REPO / "examples" / "tasks").iterdir()) if (p / "task.toml").exists()))
    groups = env._group(task, team())
    assert [g["policy"] for g in groups] == ["lead", "helper"]
    assert [t[1] for t in groups[1]["tokens"]] == [20, 30, 60]
    alone = [outcome(1.0, sequence(10, "lead"), sequence(20, "helper")), outcome(0.0, sequence(40, "lead"))]
    assert [g["policy"] for g in env._group(task, alone)] == ["lead"]  # one trial's helper rows: no advantage
    never = [outcome(1.0, sequence(10, "lead")), outcome(0.0, sequence(40, "lead"))]
    assert [g["policy"] for g in env._group(task, never)] == ["lead"]  # no trial reached the helper (the first team run
    # dropped such groups on min() of no versions)
    with pytest.raises(GroupDropped, match="no policy has a group"):
        env._group(task, alone[:1])  # each policy in one trial only
    assert isinstance(runner()._group(task, team()), dict)  # one policy: one untagged group, as always


def test_a_sub_agent_policy_is_checked_before_the_first_trial():
    import pytest
    from pydantic import ValidationError

    from rlstack.envs.config import EnvSettings
    from tests.conftest import REPO

    base = {"task": "harbor", "tasks_dir": REPO / "examples" / "tasks", "policies": LEAD_HELPER}
    assert EnvSettings(**base, agent="claude-code", sub_agent_policy="helper").policy_names == ["lead", "helper"]
    for bad, message in [({"agent": "codex", "sub_agent_policy": "helper"}, "only for agent 'claude-code'"),
                         ({"agent": "claude-code", "sub_agent_policy": "critic"}, "'critic' is not one of policies"),
                         ({"agent": "claude-code", "sub_agent_policy": "lead"}, "does not answer 'claude-haiku-4-5'")]:
        with pytest.raises(ValidationError, match=message):
            EnvSettings(**base, **bad)


def test_claude_codes_worker_asks_for_the_haiku_slot_which_names_the_sub_agent_policy(tmp_path):
    import json

    from rlstack.episodes.agents import claude_code_agent, trial_env

    binary = tmp_path / "claude"
    binary.write_text("")
    agent = claude_code_agent(binary, subagents=True, sub_agent_model="haiku")
    presets = json.loads(agent.command[agent.command.index("--agents") + 1])
    assert all(spec["model"] == "haiku" for spec in presets.values())
    env = trial_env(agent, "http://proxy:4000", "r", "t", "key", "lead", haiku_model="claude-haiku-4-5")
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "claude-haiku-4-5" and env["ANTHROPIC_MODEL"] == "claude-sonnet-4-5"
    plain = claude_code_agent(binary, subagents=True)
    assert "model" not in next(iter(json.loads(plain.command[plain.command.index("--agents") + 1]).values()))


def test_the_staleness_gate_waits_on_each_policy_in_training_unless_its_trainer_waits_or_has_finished():
    import asyncio

    from tests.unit.envs.test_agent_trials import runner

    env = runner(policies=LEAD_HELPER, max_staleness=0)
    env.batch_sizes = {"lead": 2, "helper": 2}  # one group of two trials a batch
    versions = {"lead": 5, "helper": 0}

    async def policy_version(policy: str | None = None) -> int:
        return versions[policy or "lead"]

    env.policy_version = policy_version
    env.groups_started = 1  # the helper's bound at version 0: (0 + 0 + 1) * 1

    async def room() -> bool:
        env._version_reads.clear()
        return await env._staleness_room()

    assert not asyncio.run(room())  # the helper's trainer is behind: no new group
    env.waiting_policies = {"helper"}  # ...unless it waits for a batch its queue cannot fill without new groups
    assert asyncio.run(room())
    env.waiting_policies = set()
    env.finished_policies = {"helper"}  # its trainer took all its steps: its version grows no more
    assert asyncio.run(room())
    env.groups_started = 6  # the lead's own bound (5 + 0 + 1) * 1 still holds
    assert not asyncio.run(room())
