"""Settings grouped under a new name keep their old flat names for a release: as env vars, flags,
config-file keys and keyword arguments, each warned with the new name, each in its own source's rank."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from rlstack.envs.config import EnvSettings
from rlstack.trainer.config import TrainerSettings

SERVICES = [TrainerSettings, EnvSettings]


def _field(model: type[BaseModel], path: str) -> object:
    group, _, field = path.partition(".")
    return model.model_fields[group].annotation.model_fields[field]


@pytest.mark.parametrize("cls", SERVICES, ids=lambda c: c.__name__)
def test_every_old_name_is_gone_and_points_at_a_field_of_a_group(cls):
    for old, new in cls.renamed.items():
        assert _field(cls, new) is not None, new  # KeyError: the table names a field no group has
        assert old not in cls.model_fields or old == new.partition(".")[0], f"{old} is still a field of its own"


def test_an_old_env_var_flag_and_config_key_each_land_in_the_group_and_say_the_new_name(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("RLSTACK_TRAINER_PACK_TOKENS", "512")
    config = tmp_path / "trainer.yaml"
    config.write_text("sync_mode: none\nlr: 3.0e-5\n")
    with caplog.at_level("WARNING", logger="rlstack.settings"):
        s = TrainerSettings.from_cli(["--config", str(config), "--no-verify-sync", "--eval-every", "5"])
    assert (s.packing.row_tokens, s.sync.mode, s.optimisation.lr, s.sync.verify, s.evaluation.every) == (512, "none", 3e-5, False, 5)
    for said in ("RLSTACK_TRAINER_PACK_TOKENS is now RLSTACK_TRAINER_PACKING__ROW_TOKENS", "sync_mode is now sync.mode",
                 "lr is now optimisation.lr", "--no-verify-sync is now --no-sync.verify", "--eval-every is now --evaluation.every"):
        assert said in caplog.text


def test_an_old_name_keeps_its_sources_rank(monkeypatch, tmp_path):
    """Flags over env vars over the config file, whichever spelling each uses."""
    monkeypatch.setenv("RLSTACK_TRAINER_SYNC_MODE", "none")
    assert TrainerSettings.from_cli(["--sync.mode", "broadcast"]).sync.mode == "broadcast"  # an old env var under a new flag
    assert TrainerSettings.from_cli([]).sync.mode == "none"
    config = tmp_path / "trainer.yaml"
    config.write_text("sync:\n  mode: filesystem\n")
    assert TrainerSettings.from_cli(["--config", str(config)]).sync.mode == "none"  # an old env var over a new key
    monkeypatch.delenv("RLSTACK_TRAINER_SYNC_MODE")
    monkeypatch.setenv("RLSTACK_TRAINER_SYNC__MODE", "broadcast")
    assert TrainerSettings(sync_mode="none").sync.mode == "none"  # an old keyword over a new env var


def test_old_and_new_in_one_source_the_old_wins_and_says_so(monkeypatch, caplog):
    """A values file written before the rename overrides the chart's new names by the old ones."""
    monkeypatch.setenv("RLSTACK_ENV_SANDBOX__ENVIRONMENT", "image")
    monkeypatch.setenv("RLSTACK_ENV_SANDBOX_ENVIRONMENT", "host")
    with caplog.at_level("WARNING", logger="rlstack.settings"):
        assert EnvSettings.from_cli([]).sandbox.environment == "host"
    assert "RLSTACK_ENV_SANDBOX__ENVIRONMENT is also given, and RLSTACK_ENV_SANDBOX_ENVIRONMENT wins" in caplog.text


def test_a_groups_own_old_name_is_the_old_setting_unless_it_is_an_object(monkeypatch, tmp_path):
    monkeypatch.setenv("RLSTACK_ENV_AGENT", "claude-code")
    harbor = ["--task", "harbor", "--tasks-dir", str(tmp_path)]
    s = EnvSettings.from_cli([*harbor, "--sandbox", "kubernetes", "--sandbox-claim", "trials"])
    assert (s.agent.name, s.sandbox.backend, s.sandbox.claim) == ("claude-code", "kubernetes", "trials")
    s = EnvSettings.from_cli([*harbor, "--sandbox", '{"backend": "kubernetes", "claim": "c"}'])
    assert (s.sandbox.backend, s.sandbox.claim) == ("kubernetes", "c")
    monkeypatch.setenv("RLSTACK_ENV_AGENT", '{"name": "codex", "max_turns": 3}')
    assert EnvSettings.from_cli(harbor).agent.model_dump(include={"name", "max_turns"}) == {"name": "codex", "max_turns": 3}


def test_a_setting_of_another_task_is_named_by_its_new_path_whichever_name_set_it(tmp_path):
    with pytest.raises(ValueError, match=r"scoring.retries: only for task 'harbor'"):
        EnvSettings.from_cli(["--trial-retries", "2"])
    with pytest.raises(ValueError, match=r"agent.name: only for task 'harbor'"):
        EnvSettings.from_cli(["--agent.name", "codex"])
    assert EnvSettings.from_cli(["--scoring.drop-constant-groups"]).scoring.drop_constant_groups  # any task's


def test_the_docs_list_every_renamed_setting_as_it_is():
    """docs/services.md's table of old names is the classes' tables, row for row."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[3] / "docs" / "services.md").read_text()
    listed = set(re.findall(r"^\| (?:trainer|env server) \| `(\w+)` \| `(\w+)` \| `([\w.-]+)` \|$", text, re.M))
    expected = set()
    for cls in SERVICES:
        prefix = cls.model_config["env_prefix"]
        expected |= {(f"{prefix}{old.upper()}", f"{prefix}{new.replace('.', '__').upper()}", "--" + new.replace("_", "-"))
                     for old, new in cls.renamed.items()}
    assert listed == expected
