"""Reward files: what Harbor's verifiers write, and every way of writing nothing usable."""

from __future__ import annotations

import pytest

from rlstack.episodes.trials.reward import RewardError, read_rewards, scalar_reward


@pytest.mark.parametrize(("name", "text", "rewards"), [
    ("reward.txt", "1\n", {"reward": 1.0}),
    ("reward.txt", " 0.25 ", {"reward": 0.25}),
    ("reward.json", "0.5", {"reward": 0.5}),
    ("reward.json", '{"reward": 1, "tests_passed": 3}', {"reward": 1.0, "tests_passed": 3.0}),
])
def test_reads_what_verifiers_write(tmp_path, name, text, rewards):
    (tmp_path / name).write_text(text)
    assert read_rewards(tmp_path) == rewards


def test_reward_json_wins_over_reward_txt(tmp_path):
    (tmp_path / "reward.txt").write_text("0")
    (tmp_path / "reward.json").write_text('{"reward": 1}')
    assert read_rewards(tmp_path) == {"reward": 1.0}


@pytest.mark.parametrize(("name", "text", "message"), [
    ("reward.txt", "", "not a number"),
    ("reward.txt", "PASSED", "not a number"),
    ("reward.txt", "nan", "not a finite number"),
    ("reward.json", "{", "not JSON"),
    ("reward.json", "{}", "empty object"),
    ("reward.json", '{"reward": "high"}', "not a number"),
    ("reward.json", '{"reward": true}', "not a number"),
    ("reward.json", "[1]", "not a number"),
])
def test_unusable_rewards_are_errors_never_zero(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(RewardError, match=message):
        read_rewards(tmp_path)


def test_no_reward_file(tmp_path):
    with pytest.raises(RewardError, match="neither /logs/verifier/reward.txt nor"):
        read_rewards(tmp_path)


def test_scalar_reward():
    assert scalar_reward({"reward": 0.5, "other": 1}) == 0.5
    assert scalar_reward({"accuracy": 0.75}) == 0.75
    with pytest.raises(RewardError, match="no 'reward'"):
        scalar_reward({"a": 1, "b": 0})
