"""The agent env's own rules, on its real class: every sequence of a trial posted, constant groups, staleness at start."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rlstack.envs.config import EnvSettings
from rlstack.envs.harbor_groups import TrialOutcome
from rlstack.envs.harbor_metrics import HarborMetrics
from rlstack.envs.harbor_runner import GroupDropped, HarborEnvRunner
from rlstack.envs.runner import EnvMetrics
from rlstack.episodes.assemble import AssembledSequence, Assembly
from rlstack.episodes.trials.records import (
    AgentRecord,
    TaskRecord,
    TrialResult,
    TrialStatus,
    VerifierRecord,
)
from tests.conftest import REPO


class UnusedSandbox:
    """These tests never start a trial; a sandbox is still required to build the runner."""

    kind = "unused"

    def check(self) -> None: ...

    async def run(self, job):  # noqa: ANN001, ANN201
        raise AssertionError("no trial runs in these tests")

    async def close(self) -> None: ...


def runner(**settings) -> HarborEnvRunner:
    s = EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=REPO / "examples" / "tasks", group_size=2, **settings)
    registry = CollectorRegistry()
    return HarborEnvRunner(s, EnvMetrics(registry), HarborMetrics(registry), sandbox=UnusedSandbox())


def outcome(reward: float, *sequences: tuple[int, int]) -> TrialOutcome:
    """sequences: (trained tokens, weight version) each."""
    now = datetime.now(UTC)
    result = TrialResult(run="r", trial="t", attempt=1, sandbox="unused", task=TaskRecord(name="x", path=Path("/x"),
                         schema_version="1.1"), agent=AgentRecord(name="a", command=["a"]), verifier=VerifierRecord(),
                         status=TrialStatus.OK, reward=reward, started_at=now, finished_at=now)
    seqs = [AssembledSequence(tokens=[1] * (n + 1), masks=[-100] + [7] * n, inference_logprobs=[0.0] * (n + 1),
                              calls=1, weight_versions=[v]) for n, v in sequences]
    return TrialOutcome(result, Assembly(sequences=seqs, calls=len(seqs), merged_calls=0, thread_breaks=len(seqs) - 1,
                                         failed_calls=0), token_limit=4096)


def test_every_sequence_of_a_trial_is_posted_as_a_row_of_its_member():
    r = runner()
    r.batch_fill = "at_least"  # what rlstack's trainer registers
    group = r._group(r.task.dataset.tasks[0], [outcome(1.0, (3, 5), (9, 6)), outcome(0.0, (4, 7))])
    # Trial 0's side thread is trained too (main thread first), with trial 0's reward.
    assert group["trials"] == [0, 0, 1] and group["scores"] == [1.0, 1.0, 0.0]
    assert [sum(m != -100 for m in row) for row in group["masks"]] == [9, 3, 4]
    assert group["weight_version"] == 5  # the oldest version any posted call saw
    assert group["sampling_versions"] == [[6], [5], [7]]  # per row, in the rows' order (main thread first)


@pytest.mark.parametrize(("sequences", "fill"), [("main", "at_least"), ("all", "exact")])
def test_main_only_posts_one_row_per_trial_for_exact_trainers(sequences, fill):
    r = runner(trial_sequences=sequences)
    r.batch_fill = fill  # an Atropos trainer (exact batches) gets one row per trial whatever was asked
    group = r._group(r.task.dataset.tasks[0], [outcome(1.0, (3, 5), (9, 6)), outcome(0.0, (4, 7))])
    assert group["scores"] == [1.0, 0.0] and "trials" not in group
    assert [sum(m != -100 for m in row) for row in group["masks"]] == [9, 4]  # the longer thread of trial 0
    assert group["weight_version"] == 6


def test_constant_groups_are_counted_and_dropped_only_when_asked():
    task = runner().task.dataset.tasks[0]
    assert runner()._group(task, [outcome(1.0, (2, 0)), outcome(1.0, (2, 0))])["scores"] == [1.0, 1.0]
    with pytest.raises(GroupDropped, match="no signal"):
        runner(drop_constant_groups=True)._group(task, [outcome(0.0, (2, 0)), outcome(0.0, (2, 0))])


def test_a_sequence_past_the_token_limit_is_not_scored():
    long = outcome(1.0, (5000, 0))
    assert long.too_long and not long.scored


def test_new_groups_wait_while_the_policy_would_run_too_far_ahead():
    r = runner(max_staleness=1)
    r.batch_size = 4  # two groups of two per batch
    version = {"now": 0}

    async def served_version() -> int:
        return version["now"]

    r.policy_version = served_version  # the registry's answer, without a registry

    async def scenario() -> bool:
        r.groups_started = 4  # (0 + 1 + 1) * 2: the bound for version 0
        waiting = asyncio.create_task(r._wait_for_staleness_room())
        await asyncio.sleep(0.7)
        held = not waiting.done()
        version["now"] = 1  # the trainer published a new policy
        await asyncio.wait_for(waiting, 5)
        return held

    assert asyncio.run(scenario())


class ExpectingSandbox(UnusedSandbox):
    """Records what the env tells a sandbox with a warm pool before each group; its trials fail
    (an infra error each), which drops the group after its retries."""

    def __init__(self) -> None:
        self.expected: list[tuple[list[str], int]] = []

    async def expect(self, tasks, trials_each: int) -> None:  # noqa: ANN001
        self.expected.append(([t.short_name for t in tasks], trials_each))

    async def run(self, job):  # noqa: ANN001, ANN201
        raise RuntimeError("no sandbox here")


def test_before_each_group_the_sandbox_hears_its_task_and_the_next_groups(tmp_path):
    s = EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=REPO / "examples" / "tasks", group_size=3,
                    workers=2, trials_dir=tmp_path / "trials", trial_retries=0, trial_key_secret="k" * 32)
    registry = CollectorRegistry()
    box = ExpectingSandbox()
    r = HarborEnvRunner(s, EnvMetrics(registry), HarborMetrics(registry), sandbox=box)
    first = next(r.problems)
    upcoming = [t.short_name for t in r.problems.peek()]
    with pytest.raises(GroupDropped):
        asyncio.run(r.rollout(first, "w0"))
    # this group's task (its pods must not be trimmed as it claims them) and the next `workers` groups'
    assert box.expected == [([first.short_name, *upcoming], 3)] and len(upcoming) == 2
    assert [t.short_name for t in r.problems.peek()] == upcoming  # peeking drew nothing


@pytest.mark.parametrize("agent", ["claude-code", "codex", "opencode"])
def test_an_env_whose_trials_run_in_pods_needs_no_agent_binary_of_its_own(agent):
    """In a pod a trial runs the agent bundle's binary; the env server's own image has none (the chart's
    env pod failed at start, asked for .cache/<agent> it never uses). A local sandbox still needs it."""
    from rlstack.episodes.bundle import paths as bundle

    missing = {f"{agent.replace('-', '_')}_bin": Path("/nonexistent/bin/agent")}
    in_pods = runner(agent=agent, sandbox="kubernetes", **missing)
    spec = in_pods._agent_spec()
    assert spec.image_command is not None and any(str(part).startswith(bundle.BUNDLE_BIN) for part in spec.image_command)
    with pytest.raises(FileNotFoundError, match="is not installed at /nonexistent/bin/agent"):
        runner(agent=agent, **missing)._agent_spec()
