"""``rlstack up``'s pre-flight: each replica's family, told or named, before anything starts."""

from __future__ import annotations

import pytest

from rlstack.common.model_families import ModelFamilyError
from rlstack.launcher.config import RunConfig, ServiceSpec
from rlstack.launcher.preflight import check_replicas, flag, with_model, with_model_family
from tests.conftest import REPO, VLLM_PYTHON


def config(model: str, *extra: str) -> RunConfig:
    return RunConfig(name="t", services=[
        ServiceSpec(name="registry", module="rlstack.registry"),
        ServiceSpec(name="inference", module="rlstack.inference", python=str(VLLM_PYTHON), args=["--model", model, *extra])])


def test_the_family_named_on_rlstack_up_replaces_the_configs(tiny_model):
    named = with_model_family(config(str(tiny_model), "--model-family=qwen3"), "demo")
    args = named.services[1].args
    assert flag(args, "--model-family") == "demo" and sum(a.startswith("--model-family") for a in args) == 1
    assert check_replicas(named)["inference"].name == "demo"
    assert named.services[0].args == []


def test_a_replica_whose_family_cannot_be_told_stops_the_run_before_it_starts(tmp_path):
    with pytest.raises(ModelFamilyError, match="cannot tell the model family"):
        check_replicas(config(str(tmp_path)))


def test_up_with_a_model_points_the_replicas_and_the_trainer_at_it():
    config = RunConfig.load(REPO / "examples" / "local-agent-claude-code.yaml")
    moved = {s.name: s.args for s in with_model(config, "models/claude-code-demo-qwen3").services}
    assert flag(moved["inference"], "--model") == flag(moved["trainer"], "--model") == "models/claude-code-demo-qwen3"
    assert moved["inference"].count("--model") == 1 and moved["env"] == {s.name: s.args for s in config.services}["env"]
