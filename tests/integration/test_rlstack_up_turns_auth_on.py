"""``rlstack up`` turns auth on with nothing to configure: it mints a token per server, every
route that reads or changes state answers 401 without it, and the services it started talk to
each other with it (the health chain's batcher round trip passes)."""

from __future__ import annotations

import json
import os
import stat

import httpx

from rlstack.launcher.config import RunConfig, ServiceSpec
from rlstack.launcher.health import smoke_check
from rlstack.launcher.supervisor import Supervisor

BATCHER_READS = ["/batch", "/latest_example", "/status", "/status-env?env_id=0", "/info", "/wandb_info", "/reset_data"]
REGISTRY_READS = ["/v1/endpoints", "/v1/endpoints/watch?timeout=0.1", "/v1/endpoints/replica-0"]


def test_every_state_route_needs_the_minted_token(tmp_path):
    config = RunConfig(name="auth", runs_dir=tmp_path / "runs", services=[
        ServiceSpec(name="registry", module="rlstack.registry"),
        ServiceSpec(name="batcher", module="rlstack.batcher", args=["--data-dir", "{run_dir}/batcher"])])
    run_dir = tmp_path / "runs" / "auth"
    supervisor = Supervisor(config, run_dir)
    try:
        supervisor.start_all()
        tokens = json.loads((run_dir / "auth.json").read_text())
        assert stat.S_IMODE(os.stat(run_dir / "auth.json").st_mode) == 0o600
        smoke_check(supervisor)  # the launcher's own client uses the token
        batcher, registry = supervisor.running["batcher"].url, supervisor.running["registry"].url
        for base, paths, token in ((batcher, BATCHER_READS, tokens["batcher"]), (registry, REGISTRY_READS, tokens["registry"])):
            for path in paths:
                assert httpx.get(base + path, timeout=10).status_code == 401, path
                wrong = httpx.get(base + path, headers={"Authorization": "Bearer nope"}, timeout=10)
                assert wrong.status_code == 401, path
                right = httpx.get(base + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)
                assert right.status_code != 401, (path, right.status_code)
            for open_path in ("/healthz", "/readyz", "/metrics"):
                assert httpx.get(base + open_path, timeout=10).status_code == 200
        assert tokens["batcher"] != tokens["registry"]
    finally:
        assert set(supervisor.stop_all().values()) <= {0}


def test_a_run_config_can_turn_auth_off(tmp_path):
    config = RunConfig(name="open", runs_dir=tmp_path / "runs", auth=False,
                       services=[ServiceSpec(name="batcher", module="rlstack.batcher", args=["--data-dir", "{run_dir}/b"])])
    supervisor = Supervisor(config, tmp_path / "runs" / "open")
    try:
        supervisor.start_all()
        assert not (tmp_path / "runs" / "open" / "auth.json").exists()
        assert httpx.get(supervisor.running["batcher"].url + "/status", timeout=10).status_code == 200
    finally:
        supervisor.stop_all()
