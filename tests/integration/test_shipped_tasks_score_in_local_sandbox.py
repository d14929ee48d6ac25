"""Every shipped task through the real local sandbox: its reference solution scores 1, doing nothing 0."""

from __future__ import annotations

import asyncio

import pytest

from rlstack.episodes.harbor import load_dataset
from rlstack.episodes.sandboxes import LocalSandboxConfig
from rlstack.episodes.sandboxes.local import LocalSandbox
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from tests.conftest import REPO

DATASET = load_dataset(REPO / "examples" / "tasks")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    box = LocalSandbox(LocalSandboxConfig(environment="host", work_dir=tmp_path_factory.mktemp("workspaces")))
    box.check()  # fails with the fix (install bubblewrap) rather than skipping
    return box


@pytest.mark.parametrize("task", DATASET.tasks, ids=lambda t: t.short_name)
def test_reference_solution_scores_one_and_doing_nothing_scores_zero(task, sandbox, tmp_path):
    for agent, expected in ((AgentSpec.oracle(), 1.0), (AgentSpec.nop(), 0.0)):
        spec = TrialSpec(run="shipped", trial=f"{task.short_name}-{agent.name}", task=task, agent=agent,
                         private_paths=[DATASET.root])
        result = asyncio.run(run_trial(spec, sandbox, tmp_path / "trials"))
        output = (tmp_path / "trials" / "shipped" / spec.trial / "verifier" / "test-stdout.txt").read_text()
        assert result.status == TrialStatus.OK, (agent.name, result.error, output)
        assert result.reward == expected, (agent.name, output)
