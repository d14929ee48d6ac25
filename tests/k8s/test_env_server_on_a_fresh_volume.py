"""A fresh install: the agent env server starts before anything has made the trials directory
(issue 22, item 2). Only the proxy made it, on its first write, so the env server crash-looped.
The kubernetes backend's check runs for real, against the API emulator."""

from __future__ import annotations

from rlstack.envs.app import build_app
from rlstack.envs.config import EnvSettings
from tests.conftest import REPO


def test_the_agent_env_server_makes_its_trials_directory(kube_api, tmp_path):
    trials = tmp_path / "data" / "trials"  # the shared claim, empty
    settings = EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=REPO / "examples" / "tasks", sandbox="kubernetes",
                           sandbox_image="rlstack/trainer:test", sandbox_claim="shared", trials_dir=trials,
                           kube_api_url=kube_api.url, kube_namespace="rl")
    app = build_app(settings)
    assert trials.is_dir()
    assert app.state.runner.sandbox.kind == "kubernetes"
    import asyncio

    asyncio.run(app.state.runner.aclose())
