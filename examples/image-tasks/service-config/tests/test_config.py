"""ledger.conf: port set to 8431, the other settings kept."""

from pathlib import Path


def settings() -> dict[str, str]:
    lines = Path("/etc/ledger/ledger.conf").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_port_is_8431():
    assert settings()["port"] == "8431"


def test_other_settings_kept():
    assert settings()["name"] == "ledger" and settings()["workers"] == "2"
