"""The registry against a stand-in replica: readiness from /v1/models, watch, expiry, removal.

``FakeReplicaModelsServer`` stands in for vLLM here because this suite checks the registry's
own logic; the inference tests run the same flow against real vLLM replicas.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.helpers.prometheus import metric
from tests.helpers.wait import wait_until


class FakeReplicaModelsServer:
    """Fake (not vLLM): answers GET /v1/models with a configurable model list."""

    def __init__(self) -> None:
        self.models: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                if self.path != "/v1/models":
                    self.send_error(404)
                    return
                body = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in owner.models]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def replica():
    fake = FakeReplicaModelsServer()
    yield fake
    fake.close()




def test_ready_only_once_model_is_listed_and_watch_sees_it(service_factory, replica):
    registry = service_factory("registry", ["--probe-interval-seconds", "0.2"])
    put = httpx.put(f"{registry.url}/v1/endpoints/replica-0", json={"url": replica.url, "model": "tiny", "dp_rank": 0})
    assert put.status_code == 200 and put.json()["ready"] is False

    time.sleep(0.5)  # server answers, but the model is not loaded yet
    listed = httpx.get(f"{registry.url}/v1/endpoints").json()
    assert listed["endpoints"][0]["ready"] is False
    assert "not listed" in listed["endpoints"][0]["probe_error"]

    revision = listed["revision"]
    replica.models = ["tiny"]
    watched = httpx.get(f"{registry.url}/v1/endpoints/watch", params={"revision": revision, "timeout": 10}, timeout=15).json()
    assert watched["revision"] > revision
    assert watched["endpoints"][0]["ready"] is True
    assert httpx.get(f"{registry.url}/v1/endpoints", params={"ready": "true", "model": "tiny"}).json()["endpoints"]

    replica.close()  # the replica dies without deregistering
    wait_until(lambda: not httpx.get(f"{registry.url}/v1/endpoints/replica-0").json()["ready"])


def test_missing_heartbeat_expires_and_delete_removes(service_factory, replica):
    replica.models = ["tiny"]
    registry = service_factory("registry", ["--probe-interval-seconds", "0.2"])
    httpx.put(f"{registry.url}/v1/endpoints/a", json={"url": replica.url, "model": "tiny", "ttl_seconds": 1}).raise_for_status()
    httpx.put(f"{registry.url}/v1/endpoints/b", json={"url": replica.url, "model": "tiny"}).raise_for_status()
    wait_until(lambda: [e["id"] for e in httpx.get(f"{registry.url}/v1/endpoints").json()["endpoints"]] == ["b"])
    assert httpx.delete(f"{registry.url}/v1/endpoints/b").status_code == 204
    assert httpx.delete(f"{registry.url}/v1/endpoints/b").status_code == 404
    assert 'rlstack_registry_expired_total 1.0' in httpx.get(f"{registry.url}/metrics").text


def test_a_stalled_registry_does_not_expire_the_replicas_whose_heartbeats_it_did_not_read(service_factory, replica):
    """SIGSTOP stands in for a registry starved of CPU: the heartbeats sent meanwhile wait in its
    socket. Each stall (3.5 s) outlasts a lease (3 s, beats 0.5 s apart), so without the time given
    back the beating endpoint expires on every wake-up; the silent one must expire all the same."""
    replica.models = ["tiny"]
    registry = service_factory("registry", ["--probe-interval-seconds", "0.5"])
    stop = threading.Event()

    def beat() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                client.put(f"{registry.url}/v1/endpoints/beating", json={"url": replica.url, "model": "tiny", "ttl_seconds": 3})
                stop.wait(0.5)

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        wait_until(lambda: httpx.get(f"{registry.url}/v1/endpoints/beating").status_code == 200)
        httpx.put(f"{registry.url}/v1/endpoints/silent", json={"url": replica.url, "model": "tiny", "ttl_seconds": 3}).raise_for_status()
        for _ in range(3):
            os.kill(registry.proc.pid, signal.SIGSTOP)
            time.sleep(3.5)
            os.kill(registry.proc.pid, signal.SIGCONT)
            time.sleep(1.5)
        wait_until(lambda: [e["id"] for e in httpx.get(f"{registry.url}/v1/endpoints").json()["endpoints"]] == ["beating"], timeout=30)
        metrics = httpx.get(f"{registry.url}/metrics").text
        assert "rlstack_registry_expired_total 1.0" in metrics  # the silent one, only
        assert (metric(metrics, "rlstack_registry_stalled_seconds_total") or 0) >= 3 * 2.5
    finally:
        stop.set()
        os.kill(registry.proc.pid, signal.SIGCONT)
        beater.join(timeout=30)


def test_bad_registration_names_the_field(service_factory):
    registry = service_factory("registry")
    r = httpx.put(f"{registry.url}/v1/endpoints/x", json={"url": "not a url", "model": "tiny", "weight_version": -1})
    assert r.status_code == 422
    assert {tuple(e["loc"]) for e in r.json()["detail"]} == {("body", "url"), ("body", "weight_version")}


def test_auth_token_guards_writes_and_reads(service_factory, replica):
    registry = service_factory("registry", env={"RLSTACK_REGISTRY_AUTH_TOKEN": "tok"})
    body = {"url": replica.url, "model": "tiny"}
    assert httpx.put(f"{registry.url}/v1/endpoints/x", json=body).status_code == 401
    ok = httpx.put(f"{registry.url}/v1/endpoints/x", json=body, headers={"Authorization": "Bearer tok"})
    assert ok.status_code == 200
    for path in ("/v1/endpoints", "/v1/endpoints/x", "/v1/endpoints/watch?timeout=0.1"):
        assert httpx.get(f"{registry.url}{path}").status_code == 401, path  # the table names replicas
        assert httpx.get(f"{registry.url}{path}", headers={"Authorization": "Bearer tok"}).status_code == 200, path
