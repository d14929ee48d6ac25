"""summary.json of an agent run: the held-out evaluations over the run, the agent, and the share
of continued calls carried on exact ids, read from the trials' result.json files."""

from __future__ import annotations

import json

import pytest

from rlstack.trainer.report import EvalRecord, append_line, plot, read_lines, summarize, trial_stats
from tests.unit.trainer.test_report import record


def write_result(root, trial: str, agent: str, trajectory: dict | None) -> None:  # noqa: ANN001
    path = root / "run" / trial / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"trial": trial, "agent": {"name": agent, "command": ["x"]}, "status": "ok",
                                "trajectory": trajectory}))


def test_merge_share_is_continued_calls_on_exact_ids_over_continued_calls(tmp_path):
    write_result(tmp_path, "a", "builtin", {"calls": 4, "merged_calls": 3, "thread_breaks": 0, "spliced_calls": 3,
                                            "segments": {"main": 1, "sub_agent": 1}})
    write_result(tmp_path, "b", "builtin", {"calls": 3, "merged_calls": 1, "thread_breaks": 1})  # no spliced_calls yet
    write_result(tmp_path, "c", "mini", {"calls": 1, "merged_calls": 0, "thread_breaks": 0, "segments": {"main": 1}})
    write_result(tmp_path, "d", "builtin", None)  # stopped before assembly: not counted
    (tmp_path / "run" / "e").mkdir()
    (tmp_path / "run" / "e" / "result.json").write_text("{half")  # being written
    stats = trial_stats(tmp_path)
    assert stats.agent == "builtin" and stats.trials == 3
    assert (stats.continued_calls, stats.merged_calls, stats.thread_breaks, stats.spliced_calls) == (5, 4, 1, 3)
    assert stats.merge_share == pytest.approx(0.8)
    assert stats.segments == {"main": 2, "sub_agent": 1}  # trials written before segments were counted add none


def test_a_run_without_agent_trials_has_no_agent_figures(tmp_path):
    assert trial_stats(tmp_path) is None and trial_stats(None) is None
    write_result(tmp_path, "a", "builtin", {"calls": 1, "merged_calls": 0, "thread_breaks": 0})
    assert trial_stats(tmp_path).merge_share is None  # one call each: nothing continued, no share to claim


def test_evaluations_land_in_the_summary_and_the_plot(tmp_path):
    path = tmp_path / "evals.jsonl"
    for step, phase, accuracy in ((0, "before", 0.25), (10, "during", 0.5), (20, "after", 0.75)):
        append_line(path, EvalRecord(accuracy=accuracy, problems=4, weight_version=step, step=step, phase=phase,
                                     statuses={"ok": 4}))
    evals = read_lines(path, EvalRecord)
    assert [(e.step, e.phase, e.accuracy) for e in evals] == [(0, "before", 0.25), (10, "during", 0.5), (20, "after", 0.75)]
    records = [record(i + 1, reward=0.1) for i in range(20)]
    summary = summarize(records, weight_version=20, trajectories=0, sync_mode="none", eval_before=evals[0], eval_after=evals[-1],
                        model="m", seconds=1.0, evals=evals, agent="builtin", merge_share=0.9)
    dumped = summary.model_dump(mode="json")
    assert [e["accuracy"] for e in dumped["evals"]] == [0.25, 0.5, 0.75]
    assert dumped["agent"] == "builtin" and dumped["merge_share"] == 0.9
    plot(records, tmp_path / "reward.png", "t", evals)
    assert (tmp_path / "reward.png").read_bytes()[:4] == b"\x89PNG"
