"""``rlstack up``'s pre-flight: each replica's family, told or named, before anything starts."""

from __future__ import annotations

import pytest

from rlstack.common.model_families import ModelFamilyError
from rlstack.launcher.config import RunConfig, ServiceSpec
from rlstack.launcher.preflight import check_replicas, with_model, with_model_family
from rlstack.launcher.service_settings import resolve, stand_in_addresses
from tests.conftest import REPO, VLLM_PYTHON


def config(model: str, *extra: str) -> RunConfig:
    return RunConfig(name="t", services=[
        ServiceSpec(name="registry", module="rlstack.registry"),
        ServiceSpec(name="inference", module="rlstack.inference", python=str(VLLM_PYTHON), args=["--model", model, *extra])])


def settings_of(config: RunConfig) -> dict:
    """Each service's settings as its process will read them."""
    addresses = stand_in_addresses(config.services)
    return {s.name: resolve(s, addresses) for s in config.services}


def test_the_family_named_on_rlstack_up_replaces_the_configs(tiny_model):
    named = with_model_family(config(str(tiny_model), "--model-family=qwen3"), "demo")
    assert settings_of(named)["inference"].model_family == "demo"
    assert check_replicas(named)["inference"].name == "demo"
    assert named.services[0] == config(str(tiny_model)).services[0]


def test_a_replica_whose_family_cannot_be_told_stops_the_run_before_it_starts(tmp_path):
    with pytest.raises(ModelFamilyError, match="cannot tell the model family"):
        check_replicas(config(str(tmp_path)))


def test_up_with_a_model_points_the_replicas_and_the_trainer_at_it():
    config = RunConfig.load(REPO / "examples" / "local-agent-claude-code.yaml")
    moved = with_model(config, "models/claude-code-demo-qwen3")
    settings = settings_of(moved)
    assert settings["inference"].model == settings["trainer"].model == "models/claude-code-demo-qwen3"
    assert settings_of(config)["inference"].model != "models/claude-code-demo-qwen3"
    assert {s.name: s for s in moved.services}["env"] == {s.name: s for s in config.services}["env"]


def test_the_preflight_reads_the_family_from_where_the_replica_will(tiny_model, monkeypatch):
    """A family in the replica's ``env:`` or in the shell is what the replica reads, so it is what is checked."""
    in_env = config(str(tiny_model))
    in_env.services[1].env["RLSTACK_INFERENCE_MODEL_FAMILY"] = "qwen3"
    assert check_replicas(in_env)["inference"].name == "qwen3"
    monkeypatch.setenv("RLSTACK_INFERENCE_MODEL_FAMILY", "llama3.1")
    assert check_replicas(config(str(tiny_model)))["inference"].name == "llama3.1"
    assert check_replicas(with_model_family(config(str(tiny_model)), "demo"))["inference"].name == "demo"  # a flag wins
