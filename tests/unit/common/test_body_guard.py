"""Every service's request bodies are bounded in size and time, gzip included (batcher app, real sockets)."""

import gzip

import httpx
import pytest
from fastapi.testclient import TestClient

from rlstack.batcher.app import build_app
from rlstack.batcher.config import BatcherSettings
from rlstack.common.body_guard import has_lone_surrogate
from tests.helpers.groups import env_registration, make_group, trainer_registration
from tests.helpers.serving import raw_request, served

LIMIT = 64 * 1024


@pytest.fixture
def app(tmp_path):
    return build_app(BatcherSettings(data_dir=tmp_path / "wal", max_request_bytes=LIMIT, request_read_timeout_seconds=0.5))


def test_plain_body_over_the_limit_is_413_and_nothing_is_queued(app):
    with TestClient(app) as c:
        c.post("/register", json=trainer_registration(batch_size=4))
        c.post("/register-env", json=env_registration(group_size=2))
        big = make_group(length=3000)  # ~100 KB of JSON
        r = c.post("/scored_data", json=big)
        assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body"]
        assert c.post("/scored_data", json=make_group()).status_code == 200
        assert c.get("/status").json()["queue_size"] == 1


def test_gzip_bomb_is_413_without_inflating_it_whole(app):
    bomb = gzip.compress(b"[" + b" " * (20 * 1024 * 1024) + b"]")  # 20 MiB of spaces, ~20 KB compressed
    with TestClient(app) as c:
        r = c.post("/scored_data_list", content=bomb, headers={"content-encoding": "gzip", "content-type": "application/json"})
        assert r.status_code == 413 and "inflates past" in r.json()["detail"][0]["msg"]
        assert c.get("/healthz").status_code == 200


def test_chunked_body_growing_past_the_limit_is_413(app):
    def chunks():
        for _ in range(10):
            yield b" " * (16 * 1024)

    with served(app) as url:
        r = httpx.post(f"{url}/scored_data", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413


def test_body_shorter_than_its_content_length_is_408_not_held_open(app):
    with served(app) as url:
        head = b"POST /scored_data HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        answer = raw_request(url, head + b'{"tokens": [[1')
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert httpx.get(f"{url}/healthz").status_code == 200


def test_lying_content_length_is_refused_before_reading(app):
    with served(app) as url:
        head = b"POST /scored_data HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n"
        assert raw_request(url, head).startswith(b"HTTP/1.1 413")


def test_lone_surrogate_is_422_on_every_route(app):
    with TestClient(app) as c:
        c.post("/register", json=trainer_registration(batch_size=4))
        body = b'{"max_token_length": 10, "desired_name": "x\\ud800", "group_size": 2}'
        r = c.post("/register-env", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422 and "surrogate" in r.json()["detail"][0]["msg"]
        paired = b'{"max_token_length": 10, "desired_name": "x\\ud83d\\ude00", "group_size": 2}'
        assert c.post("/register-env", content=paired, headers={"content-type": "application/json"}).status_code == 200


@pytest.mark.parametrize(("text", "lone"), [
    (rb'"\ud800"', True), (rb'"\udc00"', True), (rb'"\ud83d\ude00"', False), (rb'"\\ud800"', False),
    (rb'"\\\ud800"', True), (rb'"\ud800x\udc00"', True), (rb'"\u00e9\n"', False), (rb'"\\ud800\udc00"', True),
])
def test_surrogate_scanner_reads_escapes_left_to_right(text, lone):
    assert has_lone_surrogate(text) is lone
