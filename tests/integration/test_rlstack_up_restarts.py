"""``rlstack up`` brings back a service that dies, as a Deployment would, and ends a restart loop."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml


def start_up(tmp_path: Path, max_restarts: int) -> tuple[subprocess.Popen, Path]:
    config = {"name": "restarts", "runs_dir": str(tmp_path / "runs"), "auth": False, "services": [
        {"name": "registry", "module": "rlstack.registry",
         "restart": {"max_restarts": max_restarts, "backoff_s": 0.2, "max_backoff_s": 1}},
        {"name": "batcher", "module": "rlstack.batcher", "args": ["--data-dir", "{run_dir}/batcher"]},
    ]}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    log = (tmp_path / "up.log").open("w")
    up = subprocess.Popen([sys.executable, "-m", "rlstack.cli", "up", str(tmp_path / "run.yaml")], stdout=log,
                          stderr=subprocess.STDOUT, cwd=tmp_path)
    return up, tmp_path / "runs" / "latest"


def registry_pid(tmp_path: Path, run: Path, nth: int, timeout: float = 60) -> tuple[int, str]:
    """The ``nth`` registry process (uvicorn logs its pid) and its URL (from the launcher's log), once ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(line.split("[")[-1].rstrip("]")) for line in (run / "logs" / "registry.log").read_text().splitlines()
                if "Started server process [" in line]
        urls = [line.split("ready at ")[-1].strip() for line in (tmp_path / "up.log").read_text().splitlines()
                if "registry ready at" in line or "registry restarted" in line and "ready at" in line]
        if len(pids) >= nth and len(urls) >= nth:
            return pids[nth - 1], urls[nth - 1]
        time.sleep(0.2)
    raise AssertionError(f"registry process {nth} never came up")


def wait_until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_a_killed_service_comes_back_on_its_port_and_is_counted(tmp_path):
    up, run = start_up(tmp_path, max_restarts=3)
    try:
        wait_until(lambda: (tmp_path / "up.log").read_text().count("ready at") >= 2)
        first, url = registry_pid(tmp_path, run, 1)
        os.kill(first, signal.SIGKILL)
        second, url_after = registry_pid(tmp_path, run, 2)
        assert second != first and url_after == url  # a new process, on the same port
        assert httpx.get(f"{url}/v1/endpoints", timeout=5).status_code == 200
        assert up.poll() is None  # the run went on
        restarts = json.loads((run / "restarts.json").read_text())
        assert restarts == {"registry": {"restarts": 1, "in_a_row": 1, "exit_codes": [-9]}}
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(60)
    assert up.returncode == 0
    assert "registry died with -9; restarting" in (tmp_path / "up.log").read_text()
    assert "rlstack up: restart 1 after exit -9" in (run / "logs" / "registry.log").read_text()


def test_a_service_past_its_restarts_ends_the_run_as_a_restart_loop(tmp_path):
    up, run = start_up(tmp_path, max_restarts=1)
    try:
        wait_until(lambda: (tmp_path / "up.log").read_text().count("ready at") >= 2)
        first, _ = registry_pid(tmp_path, run, 1)
        os.kill(first, signal.SIGKILL)
        second, _ = registry_pid(tmp_path, run, 2)
        assert second != first
        os.kill(second, signal.SIGKILL)  # a second death in a row: past max_restarts=1
        up.wait(60)
    finally:
        if up.poll() is None:
            up.kill()
    out = (tmp_path / "up.log").read_text()
    assert up.returncode == 1 and "registry is in a restart loop: died 2 times in a row" in out
    assert "batcher=0" in out  # what still ran was stopped cleanly
