"""A trial's key expires with the trial (agent timeout, its sandbox's start, a margin), not days later."""

from __future__ import annotations

import time

import pytest

from rlstack.common.trial_keys import KEY_MARGIN_SECONDS, InvalidTrialKey, mint, verify
from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.trials.run import trial_key_ttl
from tests.helpers.harbor_tasks import write_task
from tests.unit.envs.test_agent_trials import runner


def test_the_env_mints_keys_that_die_with_the_trial(tmp_path):
    task = HarborTask.load(write_task(tmp_path / "t", agent_timeout_sec=60))
    assert trial_key_ttl(task) == 60 + KEY_MARGIN_SECONDS
    assert trial_key_ttl(task, override=10) == 10 + KEY_MARGIN_SECONDS
    env = runner(trial_key_secret="s3cret", run_id="r")
    now = time.time()
    key = env._trial_key("t-1", trial_key_ttl(task))
    assert verify("s3cret", key, now=now + 60).trial == "t-1"
    with pytest.raises(InvalidTrialKey, match="expired"):
        verify("s3cret", key, now=now + 60 + KEY_MARGIN_SECONDS + 2)
    with pytest.raises(InvalidTrialKey, match="expired"):  # single-turn keys: one request's worth, not a week
        verify("s3cret", env._trial_key("t-2"), now=now + 3600)


def test_a_key_needs_a_finite_positive_lifetime():
    for ttl in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="ttl_seconds"):
            mint("s", "r", "t", ttl_seconds=ttl)


def test_a_key_outlives_a_slow_sandbox_start(tmp_path):
    """The key is minted before the sandbox starts: a cold pod on a busy node reached its agent
    minutes later (the real node, 128 at once), after a key of the agent's time alone had expired."""
    from rlstack.episodes.sandboxes import KubernetesSandboxConfig
    from rlstack.episodes.sandboxes.kubernetes import KubernetesSandbox

    task = HarborTask.load(write_task(tmp_path / "t", agent_timeout_sec=60))
    config = KubernetesSandboxConfig(bundle_image="b", claim_name="c", trials_dir=tmp_path, trials_subpath="trials",
                                     deadline_slack_sec=300)
    env = runner(trial_key_secret="s3cret", run_id="r")
    assert env.key_ttl(task) == 60 + KEY_MARGIN_SECONDS  # the test's sandbox starts at once
    env.sandbox = KubernetesSandbox(None, config)
    assert env.key_ttl(task) == 60 + 300 + KEY_MARGIN_SECONDS
