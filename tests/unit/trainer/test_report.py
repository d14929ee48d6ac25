import pytest

from rlstack.trainer.report import StepRecord, count_trajectories, plot, summarize


def record(step: int, reward: float, sync: float | None = 0.5, stale: float = 1.0) -> StepRecord:
    return StepRecord(step=step, weight_version=step, loss=0.1, reward_mean=reward, reward_std=0.1, kl=0.0, clip_fraction=0.0,
                      ratio_mean=1.0, grad_norm=1.0, tokens=100, step_seconds=1.0, tokens_per_second=100.0, wait_seconds=0.0,
                      staleness_mean=stale, staleness_max=2, sync_seconds=sync)


def test_summary_means_first_and_last_ten_steps(tmp_path):
    records = [record(i + 1, reward=0.1 if i < 10 else 0.9, sync=None if i % 2 else float(i)) for i in range(25)]
    summary = summarize(records, weight_version=25, trajectories=3, sync_mode="filesystem", eval_before=None, eval_after=None,
                        model="m", seconds=1.0)
    assert summary.steps == 25
    assert summary.reward_first == pytest.approx(0.1) and summary.reward_last == pytest.approx(0.9)
    assert summary.sync_seconds_median == 12.0  # the even steps 0..24
    plot(records, tmp_path / "reward.png", "t")
    assert (tmp_path / "reward.png").read_bytes()[:4] == b"\x89PNG"


def test_empty_run_summarises_to_nothing():
    summary = summarize([], weight_version=0, trajectories=0, sync_mode="none", eval_before=None, eval_after=None, model="m", seconds=0)
    assert summary.steps == 0 and summary.reward_first is None and summary.sync_seconds_median is None


def test_trajectories_are_counted_per_line(tmp_path):
    for trial, lines in (("a", 3), ("b", 2)):
        path = tmp_path / "run" / trial / "litellm-trajectory.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("{}\n" * lines + "\n")
    assert count_trajectories(tmp_path) == 5 and count_trajectories(None) == 0
