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


def trainer(args: list[str] | None = None, **settings) -> ServiceSpec:
    return ServiceSpec(name="trainer", module="rlstack.trainer", args=args or [], settings=settings)


def test_a_groups_setting_is_one_flag_however_the_config_writes_it():
    """As the group (``packing: {row_tokens: ...}``), as a dotted key or by its old flat name: the same
    flag, and the same value read back."""
    as_group = trainer(packing={"row_tokens": 512, "share_prefix": None}, sync={"mode": "none"})
    dotted = trainer(**{"packing.row_tokens": 512, "packing.share_prefix": None, "sync.mode": "none"})
    old = trainer(pack_tokens=512, share_prefix=None, sync_mode="none")
    addresses = stand_in_addresses([as_group])
    flags = ["--packing.row-tokens", "512", "--packing.share-prefix", "null", "--sync.mode", "none"]
    for spec in (as_group, dotted, old):
        assert command_args(spec, addresses) == flags
        settings = resolve(spec, addresses)
        assert (settings.packing.row_tokens, settings.packing.share_prefix, settings.sync.mode) == (512, None, "none")


def test_a_groups_setting_given_as_a_flag_too_or_unknown_is_refused_when_the_config_is_read():
    with pytest.raises(ValidationError, match="settings: packing.row_tokens also given as a flag in args"):
        trainer(["--pack-tokens", "1024"], packing={"row_tokens": 512})  # the old flag is the same setting
    with pytest.raises(ValidationError, match="settings: packing.row_tokenz not a setting of rlstack.trainer"):
        trainer(packing={"row_tokenz": 512})
    with pytest.raises(ValidationError, match="settings: model.x not a setting of rlstack.trainer"):
        trainer(**{"model.x": 1})
