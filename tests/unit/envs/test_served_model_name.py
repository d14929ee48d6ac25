"""One name for the served model in every service: ``served_model_name`` (vLLM's own), with the
env server's and trainer's old ``served_model`` still accepted as flag, env var and keyword."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlstack.envs.config import EnvSettings
from rlstack.inference.config import InferenceSettings
from rlstack.proxy.config import ProxySettings
from rlstack.trainer.config import TrainerSettings


@pytest.mark.parametrize(("settings", "prefix"), [(EnvSettings, "RLSTACK_ENV_"), (TrainerSettings, "RLSTACK_TRAINER_")])
def test_the_old_name_still_sets_the_one_name(settings, prefix, monkeypatch):
    sync = ["--sync-mode", "none"] if settings is TrainerSettings else []
    assert settings.from_cli([*sync, "--served-model-name", "a"]).served_model_name == "a"
    assert settings.from_cli([*sync, "--served-model", "b"]).served_model_name == "b"
    monkeypatch.setenv(f"{prefix}SERVED_MODEL", "c")
    assert settings.from_cli(sync).served_model_name == "c"
    assert settings.from_cli([*sync, "--served-model", "c"]).served_model is None  # only one name is read afterwards
    monkeypatch.setenv(f"{prefix}SERVED_MODEL_NAME", "d")
    with pytest.raises(ValidationError, match="served_model: the old name of served_model_name, which says 'd'"):
        settings.from_cli(sync)


def test_every_service_calls_it_the_same():
    for settings in (EnvSettings, TrainerSettings, InferenceSettings, ProxySettings):
        assert "served_model_name" in settings.model_fields, settings.__name__
