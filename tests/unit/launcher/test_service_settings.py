"""A service in a run config as its own settings model: typed ``settings`` checked when the config is read,
made flags only where the process starts, and read back through the service's model, never by hand."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlstack.launcher.config import RunConfig, ServiceSpec
from rlstack.launcher.service_settings import (
    ServiceSettingsError,
    as_flags,
    command_args,
    resolve,
    stand_in_addresses,
)


def replica(**settings) -> ServiceSpec:
    return ServiceSpec(name="inference", module="rlstack.inference", args=["--model", "models/a", "--max-model-len", "512"],
                       settings=settings)


def test_each_kind_of_value_reaches_the_service_as_the_value():
    spec = ServiceSpec(name="inference", module="rlstack.inference", args=["--model", "models/a"],
                       settings={"max_model_len": None, "enforce_eager": False, "extra_vllm_args": ["--seed", "{x}"],
                                 "weights_dir": "{run_dir}/weights", "kv_cache_gib": 2.5})
    settings = resolve(spec, stand_in_addresses([spec], run_dir="/runs/r"))
    assert settings.model == "models/a"
    assert settings.max_model_len is None  # null: off
    assert settings.enforce_eager is False and settings.kv_cache_gib == 2.5
    assert settings.extra_vllm_args == ["--seed", "{x}"]  # data, not a placeholder
    assert str(settings.weights_dir) == "/runs/r/weights"


def test_flags_are_made_in_one_place_when_the_process_starts():
    assert as_flags({"enforce_eager": True, "enable_lora": False, "pack_tokens": None}) == [
        "--enforce-eager", "--no-enable-lora", "--pack-tokens", "null"]
    spec = ServiceSpec(name="proxy", module="rlstack.proxy", args=["--registry-url", "{registry.url}"],
                       settings={"policies": [{"name": "a", "served_names": ["m-*"]}]})
    addresses = stand_in_addresses([spec])
    addresses["registry"] = addresses["proxy"]
    assert command_args(spec, addresses) == ["--registry-url", addresses["proxy"].url,
                                             "--policies", '[{"name": "a", "served_names": ["m-*"]}]']


def test_a_setting_the_service_does_not_have_is_refused_when_the_config_is_read():
    with pytest.raises(ValidationError, match="settings: max_modle_len not a setting of rlstack.inference"):
        replica(max_modle_len=512)
    with pytest.raises(ValidationError, match="rlstack.agent has no settings model here"):
        ServiceSpec(name="agent", module="rlstack.agent", settings={"x": 1})
    with pytest.raises(ValidationError, match="settings: model also given as a flag in args; give each once"):
        replica(model="models/b")


def test_a_value_the_service_refuses_names_the_service_and_the_field():
    config = RunConfig(name="t", services=[replica(kv_cache_gib=-1)])
    with pytest.raises(ServiceSettingsError, match="^inference: kv_cache_gib: Input should be greater than 0"):
        resolve(config.services[0], stand_in_addresses(config.services))
