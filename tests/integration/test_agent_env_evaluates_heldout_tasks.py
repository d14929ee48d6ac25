"""POST /evaluate on an agent env: one trial per held-out task in the real local sandbox, the
pass rate answered. Agents that call no model (doing nothing, the reference solution) pin the
two ends: 0 and 1. The policy-driven evaluation runs in the agent run (test_agent_run_end_to_end)."""

from __future__ import annotations

import asyncio
import json

import httpx
from prometheus_client import CollectorRegistry

from rlstack.envs.app import build_app
from rlstack.envs.config import EnvSettings
from rlstack.envs.harbor_metrics import HarborMetrics
from rlstack.envs.harbor_runner import HarborEnvRunner
from rlstack.envs.runner import EnvMetrics
from rlstack.episodes.trials.records import AgentSpec
from tests.conftest import REPO

TASKS = REPO / "examples" / "tasks"


def settings(tmp_path, **fields) -> EnvSettings:
    return EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=TASKS, trials_dir=tmp_path / "trials", run_id="ev", name="ev",
                       max_concurrent_trials=2, **fields)


async def post_evaluate(app) -> httpx.Response:  # noqa: ANN001 - a FastAPI app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env") as client:
        return await client.post("/evaluate")


def test_evaluate_runs_one_trial_per_held_out_task_and_answers_the_pass_rate(tmp_path):
    app = build_app(settings(tmp_path, heldout_size=2, eval_samples=2, agent_command="true {instruction}"))  # does nothing
    r = asyncio.run(post_evaluate(app))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["accuracy"] == 0.0 and body["problems"] == 2 and body["trials"] == 4 and body["statuses"] == {"ok": 4}
    held = sorted(t.short_name for t in app.state.runner.task.heldout())
    results = [json.loads(p.read_text()) for p in (tmp_path / "trials" / "ev").glob("*/result.json")]
    assert all("-eval-" in r["trial"] for r in results)
    assert sorted(r["task"]["path"].rsplit("/", 1)[-1] for r in results) == sorted(held * 2)  # each held-out task twice
    asyncio.run(app.state.runner.aclose())


def test_the_reference_solutions_pass_every_held_out_task(tmp_path):
    metrics = CollectorRegistry()
    runner = HarborEnvRunner(settings(tmp_path, heldout_size=3), EnvMetrics(metrics), HarborMetrics(metrics))
    runner.agent = AgentSpec.oracle()

    async def go() -> dict:
        try:
            return await runner.evaluate()
        finally:
            await runner.aclose()

    body = asyncio.run(go())
    assert body["accuracy"] == 1.0 and body["problems"] == 3 and body["reward_mean"] == 1.0


def test_an_env_that_holds_nothing_out_says_which_setting_to_change(tmp_path):
    app = build_app(settings(tmp_path))
    r = asyncio.run(post_evaluate(app))
    assert r.status_code == 404 and "heldout_size" in r.json()["detail"] and "--heldout-size" in r.json()["detail"]
    asyncio.run(app.state.runner.aclose())
