import pytest
from pydantic import ValidationError

from rlstack.batcher.config import BatcherSettings
from rlstack.registry.config import RegistrySettings


def test_flags_win_over_env(monkeypatch):
    monkeypatch.setenv("RLSTACK_BATCHER_PORT", "9001")
    monkeypatch.setenv("RLSTACK_BATCHER_MAX_STALENESS", "3")
    s = BatcherSettings.from_cli(["--port", "9002"])
    assert s.port == 9002 and s.max_staleness == 3


def test_each_service_reads_its_own_prefix(monkeypatch):
    monkeypatch.setenv("RLSTACK_REGISTRY_DEFAULT_TTL_SECONDS", "7")
    assert RegistrySettings.from_cli([]).default_ttl_seconds == 7
    assert BatcherSettings.from_cli([]).port == 8000


def test_out_of_range_value_names_the_field(monkeypatch):
    monkeypatch.setenv("RLSTACK_BATCHER_MAX_QUEUE_SEQUENCES", "0")
    with pytest.raises(ValidationError, match="max_queue_sequences"):
        BatcherSettings.from_cli([])


def test_secrets_are_masked_in_dry_run_output():
    s = BatcherSettings.from_cli(["--auth-token", "hunter2"])
    assert "hunter2" not in s.dump_json()
    assert s.auth_token.get_secret_value() == "hunter2"
