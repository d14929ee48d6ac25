"""`helm test` runs `rlstack doctor` in a pod whose only credentials are env vars from the auth
Secret; the batcher and registry check reads, so doctor must send those tokens (real services)."""

from __future__ import annotations

from rlstack.ops.doctor import BATCHER_TOKEN_ENV, DoctorConfig, check_batcher, check_replicas


def test_doctor_reads_batcher_and_registry_with_the_tokens_the_chart_gives_it(service_factory, monkeypatch):
    env = {"RLSTACK_BATCHER_AUTH_TOKEN": "b-tok", "RLSTACK_REGISTRY_AUTH_TOKEN": "r-tok"}
    batcher = service_factory("batcher", env=env)
    registry = service_factory("registry", env=env)
    config = {"batcher_url": batcher.url, "registry_url": registry.url, "timeout_s": 5}
    monkeypatch.delenv(BATCHER_TOKEN_ENV, raising=False)
    monkeypatch.delenv("RLSTACK_REGISTRY_TOKEN", raising=False)
    assert not check_batcher(DoctorConfig(**config), None).ok  # 401 without the token
    assert not check_replicas(DoctorConfig(**config), None).ok
    monkeypatch.setenv(BATCHER_TOKEN_ENV, "b-tok")
    monkeypatch.setenv("RLSTACK_REGISTRY_TOKEN", "r-tok")
    batcher_check = check_batcher(DoctorConfig(**config), None)
    assert batcher_check.ok, batcher_check
    replicas = check_replicas(DoctorConfig(**config), None)
    assert replicas.detail == "none" and "no replica registered" in replicas.remedy  # read, with nothing registered
