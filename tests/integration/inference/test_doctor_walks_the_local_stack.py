"""`rlstack doctor` against the real local stack: green when everything answers, and a named
cause when the model name is wrong or a service is down."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, free_port


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlstack.cli", "doctor", *args], cwd=REPO, capture_output=True, text=True, timeout=180)


def test_doctor_is_green_on_a_healthy_stack_and_explains_failures(service_factory, registry, replica, proxy, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    common = ["--proxy-url", proxy.url, "--registry-url", registry.url, "--batcher-url", batcher.url,
              "--trial-key", proxy.key("doctor", "ping")]

    healthy = doctor(*common)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "replica-0 v" in healthy.stdout and "answered" in healthy.stdout

    wrong_name = doctor(*common, "--served-model", "not-the-policy")
    assert wrong_name.returncode == 1
    assert "model-name mismatch" in wrong_name.stdout

    dead = ["--proxy-url", proxy.url, "--registry-url", registry.url, "--batcher-url", f"http://127.0.0.1:{free_port()}",
            "--trial-key", proxy.key("doctor", "ping")]
    down = doctor(*dead)
    assert down.returncode == 1 and "connection refused" in down.stdout
