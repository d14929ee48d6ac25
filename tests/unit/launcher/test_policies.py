"""A run config's ``policies:`` block: what each service is given, and each bad input's one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlstack.common.model_families import ModelFamilyError
from rlstack.launcher.config import RunConfig
from rlstack.launcher.policies import PolicyConfigError, expand
from rlstack.launcher.service_settings import command_args
from rlstack.launcher.supervisor import Supervisor

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TEAM = EXAMPLES / "local-agent-claude-code-team.yaml"


def team(**changes) -> dict:
    data = RunConfig.load(TEAM).model_dump(mode="json", exclude_defaults=True)
    data.update(changes)
    return data


@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.glob("*.yaml") if p != TEAM), ids=lambda p: p.name)
def test_a_config_without_policies_starts_exactly_as_written(path):
    config = RunConfig.load(path)
    assert expand(config) == config


def test_each_policy_gets_its_model_name_and_directories_and_the_shared_services_the_table():
    config = expand(RunConfig.load(TEAM))
    addresses = {**Supervisor(config, Path("/nonexistent"))._addresses(), "run_dir": "/nonexistent"}  # as each starts
    args = {s.name: command_args(s, addresses) for s in config.services}

    def value(service: str, flag: str) -> str:
        return args[service][args[service].index(flag) + 1]

    for policy in ("lead", "helper"):
        model = f"models/claude-code-{policy}"
        assert value(f"inference-{policy}", "--served-model-name") == policy == value(f"trainer-{policy}", "--served-model-name")
        assert value(f"inference-{policy}", "--model") == model == value(f"trainer-{policy}", "--model")
        assert value(f"trainer-{policy}", "--batcher-policy") == policy
        assert value(f"trainer-{policy}", "--run-dir") == "/nonexistent/policies/" + policy
        # the replica restarts on what its own trainer published, never the other policy's
        assert value(f"inference-{policy}", "--weights-dir") == value(f"trainer-{policy}", "--sync.weights-dir") \
            == "/nonexistent/policies/" + policy + "/weights"
    assert json.loads(value("batcher", "--policies")) == ["lead", "helper"]
    routes = json.loads(value("proxy", "--policies"))
    assert routes == json.loads(value("env", "--policies"))
    assert [r["name"] for r in routes] == ["lead", "helper"] and routes[1]["served_names"] == ["claude-haiku-*"]
    assert config.until_services == ["trainer-lead", "trainer-helper"]


def services_without(name: str) -> list[dict]:
    return [s for s in team()["services"] if s["name"] != name]


def tagged(name: str, **changes) -> list[dict]:
    return [{**s, **changes} if s["name"] == name else s for s in team()["services"]]


@pytest.mark.parametrize(("services", "message"), [
    (services_without("inference-helper"), "policy 'helper' has no replicas: tag an rlstack.inference service `policy: helper`"),
    (services_without("trainer-helper"), "policy 'helper' has 0 trainers"),
    (tagged("trainer-helper", policy="lead"), "policy 'lead' has 2 trainers (['trainer-lead', 'trainer-helper'])"),
    (tagged("inference-helper", policy=None), "service 'inference-helper' (rlstack.inference) names no policy"),
    (tagged("inference-helper", policy="critic"), "service 'inference-helper': policy 'critic' is not one of the declared"),
    (tagged("trainer-lead", args=["--model", "models/tiny"]), "service 'trainer-lead': --model come from policy 'lead'"),
])
def test_a_config_that_cannot_start_as_written_is_refused_naming_the_policy(services, message):
    data = team(services=services, until="registry")
    with pytest.raises(PolicyConfigError) as err:
        expand(RunConfig.model_validate(data))
    assert message in str(err.value)


def test_a_name_two_policies_claim_is_refused_when_the_config_is_read():
    policies = team()["policies"]
    policies[1]["served_names"] = ["claude-*"]
    with pytest.raises(ValidationError, match=r"'lead' claims 'claude-sonnet-\*' and 'helper' claims 'claude-\*'"):
        RunConfig.model_validate(team(policies=policies))


def test_a_service_naming_a_policy_in_a_config_without_policies_is_refused():
    data = team(policies=[], until="registry")
    with pytest.raises(PolicyConfigError, match="name a policy, but the config declares no policies: block"):
        expand(RunConfig.model_validate(data))


def test_a_declared_family_the_model_directory_contradicts_is_refused(tmp_path):
    (tmp_path / "rlstack-model.json").write_text(json.dumps({"model_family": "demo"}))
    policies = team()["policies"]
    policies[1] |= {"model": str(tmp_path), "family": "qwen3"}
    with pytest.raises(ModelFamilyError, match=r"policy 'helper': declares model family 'qwen3', but .* is 'demo'"):
        expand(RunConfig.model_validate(team(policies=policies)))
