"""``--auth-token``'s help tells the truth: the registry (like the batcher and the trainer) refuses
reads without the token, not only changes; the probes stay open for Kubernetes."""

from __future__ import annotations

import subprocess
import sys

from fastapi.testclient import TestClient

from rlstack.registry.app import build_app
from rlstack.registry.config import RegistrySettings


def test_the_help_says_reads_need_the_token():
    result = subprocess.run([sys.executable, "-m", "rlstack.registry", "--help"], capture_output=True, text=True, timeout=60)
    words = " ".join(result.stdout.split()).partition("options:")[2]  # past the usage line
    help_text = words[words.index("--auth-token {"):words.index("--config {")]
    assert "reads too" in help_text and "/healthz, /readyz and /metrics stay open" in help_text
    assert "mutating" not in help_text


def test_the_registry_does_what_the_help_says():
    with TestClient(build_app(RegistrySettings(auth_token="t0ken", probe_interval_seconds=300))) as client:
        assert client.get("/v1/endpoints").status_code == 401
        assert client.get("/v1/endpoints", headers={"Authorization": "Bearer t0ken"}).status_code == 200
        assert client.get("/healthz").status_code == 200
