"""``rlstack up``: services start in order, the health chain passes, everything stops with 0."""

import subprocess
import sys

import yaml

from tests.conftest import REPO


def run_up(config_path, tmp_path):
    return subprocess.run([sys.executable, "-m", "rlstack.cli", "up", str(config_path), "--check"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_up_check_starts_and_stops_the_foundation_stack(tmp_path):
    config = yaml.safe_load((REPO / "examples" / "local-foundation.yaml").read_text())
    config["runs_dir"] = str(tmp_path / "runs")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_up(path, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "batcher round trip ok" in done.stdout
    assert "stopped: batcher=0, registry=0" in done.stderr
    latest = tmp_path / "runs" / "latest"
    assert (latest / "logs" / "batcher.log").exists()


def test_a_crashing_service_is_reported_with_its_log(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "runs_dir": str(tmp_path / "runs"), "services": [
        {"name": "registry", "module": "rlstack.registry"},
        {"name": "batcher", "module": "rlstack.batcher", "args": ["--max-queue-sequences", "0"]},
    ]}))
    done = run_up(path, tmp_path)
    assert done.returncode == 1
    assert "batcher exited with" in done.stderr
    assert "max_queue_sequences" in done.stderr  # the tail of the batcher's own log
    assert "registry=0" in done.stderr  # what did start was stopped cleanly
