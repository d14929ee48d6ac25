"""The trainer's held-out evaluation against a real agent env server on loopback (its trials in
the real local sandbox; an agent that does nothing, so no model is needed): the env's token is
sent, the pass rate lands in evals.jsonl and the gauge, and an env that cannot evaluate is not
asked again and again."""

from __future__ import annotations

import asyncio
import json

from prometheus_client import CollectorRegistry

from rlstack.envs.app import build_app
from rlstack.envs.config import EnvSettings
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.loop import TrainingLoop
from rlstack.trainer.metrics import TrainerMetrics
from tests.conftest import REPO
from tests.helpers.serving import served

TASKS = REPO / "examples" / "tasks"


def env_app(tmp_path, **fields):  # noqa: ANN001, ANN201
    return build_app(EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=TASKS, trials_dir=tmp_path / "trials", run_id="ev", name="ev",
                                 auth_token="env-token", agent_command="true {instruction}", **fields))


class Counted:
    """The app, counting the POST /evaluate it was sent."""

    def __init__(self, app) -> None:  # noqa: ANN001
        self.app, self.asked = app, 0

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] == "http" and scope["path"] == "/evaluate":
            self.asked += 1
        await self.app(scope, receive, send)


def loop(tmp_path, url: str, token: str | None) -> TrainingLoop:  # noqa: ANN001
    settings = TrainerSettings(eval_url=url, eval_token=token, sync_mode="none", run_dir=tmp_path / "run", steps=1)
    (tmp_path / "run").mkdir(exist_ok=True)
    return TrainingLoop(settings, TrainerMetrics(CollectorRegistry()))


def test_the_pass_rate_is_asked_with_the_envs_token_and_recorded(tmp_path):
    with served(env_app(tmp_path, heldout_size=2), lifespan="off") as url:
        trainer = loop(tmp_path, url, "env-token")
        result = asyncio.run(trainer._eval_round("before"))
    assert result is not None and result.accuracy == 0.0 and result.problems == 2 and result.statuses == {"ok": 2}
    line = json.loads((tmp_path / "run" / "evals.jsonl").read_text())
    assert (line["phase"], line["step"], line["problems"], line["accuracy"]) == ("before", 0, 2, 0.0)
    assert trainer.metrics.eval_score._value.get() == 0.0


def test_an_env_that_refuses_or_has_nothing_to_evaluate_is_not_asked_again(tmp_path):
    for app, token in ((Counted(env_app(tmp_path, heldout_size=2)), None),  # 401 without the env's token
                       (Counted(env_app(tmp_path)), "env-token")):  # 404: nothing held out
        with served(app, lifespan="off") as url:
            assert asyncio.run(loop(tmp_path, url, token).evaluator.evaluate()) is None
        assert app.asked == 1  # answered: not asked again (it is only while the env is not up yet)
    assert not list((tmp_path / "trials").glob("ev/*/result.json"))  # neither ran a trial
