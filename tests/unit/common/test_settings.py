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


def test_config_file_then_env_then_flags(tmp_path, monkeypatch):
    path = tmp_path / "batcher.yaml"
    path.write_text("port: 9100\nmax_staleness: 2\nlog_level: warning\n")
    s = BatcherSettings.from_cli(["--config", str(path)])
    assert (s.port, s.max_staleness, s.log_level, s.config) == (9100, 2, "warning", path)
    monkeypatch.setenv("RLSTACK_BATCHER_MAX_STALENESS", "5")
    monkeypatch.setenv("RLSTACK_BATCHER_PORT", "9200")
    s = BatcherSettings.from_cli([f"--config={path}", "--port", "9300"])
    assert (s.port, s.max_staleness, s.log_level) == (9300, 5, "warning")


def test_config_file_named_by_env(tmp_path, monkeypatch):
    path = tmp_path / "registry.yaml"
    path.write_text("default_ttl_seconds: 11\n")
    monkeypatch.setenv("RLSTACK_REGISTRY_CONFIG", str(path))
    assert RegistrySettings.from_cli([]).default_ttl_seconds == 11


def test_a_bad_key_in_the_config_file_is_named(tmp_path):
    path = tmp_path / "batcher.yaml"
    path.write_text("port: 9100\nmax_stalenes: 2\n")
    with pytest.raises(ValidationError, match="max_stalenes"):
        BatcherSettings.from_cli(["--config", str(path)])
    with pytest.raises(SystemExit, match="not a file"):
        BatcherSettings.from_cli(["--config", str(tmp_path / "missing.yaml")])


def test_dry_run_prints_the_merged_settings(tmp_path):
    import json
    import subprocess
    import sys

    path = tmp_path / "batcher.yaml"
    path.write_text("port: 9100\nmax_staleness: 2\n")
    done = subprocess.run([sys.executable, "-m", "rlstack.batcher", "--config", str(path), "--max-staleness", "4", "--dry-run"],
                          capture_output=True, text=True, timeout=60, check=True)
    printed = json.loads(done.stdout)
    assert (printed["port"], printed["max_staleness"]) == (9100, 4)
