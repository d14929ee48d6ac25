"""The proxy fuzzed where agents reach it: the session's real LiteLLM proxy (with rlstack's front
layer, trial-end route and token-in relay) in front of the session's real vLLM replica, over
loopback sockets.

Schemathesis sends generated requests, fitting and breaking a small hand-written OpenAPI document
of the routes rlstack adds (``tests/fuzz/proxy_api.py``); hypothesis swaps any field of good
bodies for hostile values; hand-made bytes cover what neither writes (lone surrogates, NaN, deep
nesting, gzip, bodies too large or too short, forged keys and headers). No 5xx (a replica is
ready, so not even the documented 503), no request left unanswered, and a trial's records from
before the fuzz are intact and a good call still works after it.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from rlstack.common.contracts.trajectory import read_trajectory, trajectory_files
from rlstack.common.contracts.trial_end import end_token
from rlstack.common.trial_keys import mint
from tests.conftest import ServiceProcess
from tests.fuzz import proxy_api
from tests.fuzz.harness import FuzzReport, fuzz
from tests.fuzz.proxy_api import GOOD_CHAT, GOOD_CHAT_TOOLS, GOOD_MESSAGES, RUN, TRIAL
from tests.integration.inference.conftest import SECRET

EXAMPLES = 6
"""Schemathesis requests per operation and mode."""
WRONG_TYPED = 20
"""Hypothesis bodies per route with one field swapped for a hostile value."""
TIMEOUT = 30.0
"""Seconds an answer may take before the request counts as a hang (a capped call takes well under 1 s)."""
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages?beta=true"
COUNT = "/v1/messages/count_tokens?beta=true"
BODY_LIMIT = 16 * 1024 * 1024


def prefixed(trial: str, route: str) -> str:
    return f"/trials/{RUN}/{trial}{route}"


class Checker:
    """Sends requests and keeps every 5xx and unanswered one, with what was sent."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(base_url=url, timeout=TIMEOUT)
        self.findings: list[str] = []
        self.calls = 0

    def post(self, path: str, content: bytes, key: str | None, headers: dict | None = None, what: str = "") -> httpx.Response | None:
        sent = {"content-type": "application/json", **(headers or {})}
        if key is not None:
            sent["authorization"] = f"Bearer {key}"
        self.calls += 1
        raw = {k: v.encode("latin-1") if isinstance(v, str) else v for k, v in sent.items()}
        try:
            r = self.client.post(path, content=content, headers=raw)
        except httpx.TimeoutException:
            self.findings.append(f"POST {path} {what}: no answer within {TIMEOUT} s; body {content[:200]!r}")
            return None
        except httpx.TransportError as exc:
            self.findings.append(f"POST {path} {what}: {type(exc).__name__} {exc}; body {content[:200]!r}")
            return None
        if r.status_code >= 500:
            self.findings.append(f"POST {path} {what}: {r.status_code} {r.text[:300]}; body {content[:300]!r} headers {headers}")
        return r


def records(trials_dir: Path, trial: str) -> list:
    return read_trajectory(trials_dir / RUN / trial)


def good_calls(checker: Checker, key: str, trial: str) -> None:
    for route, body in ((CHAT, GOOD_CHAT), (MESSAGES, GOOD_MESSAGES), (CHAT, GOOD_CHAT_TOOLS)):
        r = checker.post(prefixed(trial, route), orjson.dumps(body), key, what="good call")
        assert r is not None and r.status_code == 200, r and r.text


def wait_records(trials_dir: Path, trial: str, expect: int, timeout: float = 20.0) -> list:
    deadline = time.monotonic() + timeout
    while len(found := records(trials_dir, trial)) < expect:
        if time.monotonic() > deadline:
            raise AssertionError(f"{trial}: {len(found)} records, expected {expect}")
        time.sleep(0.1)
    return found


def end(url: str, trial: str) -> dict:
    """The trial's end: waits for its calls' records, flushes the writer, answers them all."""
    r = httpx.post(f"{url}/trials/{RUN}/{trial}/end", headers={"Authorization": f"Bearer {end_token(SECRET, RUN, trial)}"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def schema_fuzz(url: str, key: str) -> list[FuzzReport]:
    """Both documents, each operation with positive and negative cases; the model routes also without a key."""
    authorized = {"Authorization": f"Bearer {key}"}
    end = {"Authorization": f"Bearer {end_token(SECRET, RUN, TRIAL)}"}
    allow_ops_503: Callable[[str, int], bool] = lambda path, status: status == 503 and path == "/health/ping"  # noqa: E731
    return [fuzz(proxy_api.model_routes(), url, examples=EXAMPLES, timeout=TIMEOUT, headers=authorized),
            fuzz(proxy_api.model_routes(), url, examples=EXAMPLES // 3, timeout=TIMEOUT),
            fuzz(proxy_api.end_and_ops_routes(), url, examples=EXAMPLES, timeout=TIMEOUT, headers=end,
                 allowed_5xx=allow_ops_503)]


def wrong_typed(checker: Checker, key: str) -> None:
    for route, base in ((CHAT, GOOD_CHAT), (CHAT, GOOD_CHAT_TOOLS), (MESSAGES, GOOD_MESSAGES), (COUNT, GOOD_MESSAGES)):
        wrong_typed_route(checker, key, prefixed(TRIAL, route), base)


def wrong_typed_route(checker: Checker, key: str, path: str, base: dict) -> None:
    @settings(max_examples=WRONG_TYPED, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(body=proxy_api.wrong_typed_bodies(base))
    def one(body: bytes) -> None:
        checker.post(path, body, key, what="wrong-typed field")

    one()


def continued_conversations(checker: Checker, key: str) -> None:
    """Follow-ups of a real answer (token-in splices these onto the thread's exact ids), one field made hostile."""
    r = checker.post(prefixed(TRIAL, CHAT), orjson.dumps(GOOD_CHAT), key, what="first turn")
    assert r is not None and r.status_code == 200, r and r.text
    reply = {k: v for k, v in r.json()["choices"][0]["message"].items() if k in ("role", "content", "tool_calls") and v}
    follow = {**GOOD_CHAT, "messages": [*GOOD_CHAT["messages"], reply, {"role": "user", "content": "And 3 + 3?"}]}
    wrong_typed_route(checker, key, prefixed(TRIAL, CHAT), follow)
    r = checker.post(prefixed(TRIAL, MESSAGES), orjson.dumps(GOOD_MESSAGES), key, what="first turn")
    assert r is not None and r.status_code == 200, r and r.text
    turn = {"role": "assistant", "content": r.json()["content"] or [{"type": "text", "text": ""}]}
    follow = {**GOOD_MESSAGES, "messages": [*GOOD_MESSAGES["messages"], turn, {"role": "user", "content": "And 3 + 3?"}]}
    wrong_typed_route(checker, key, prefixed(TRIAL, MESSAGES), follow)


def hostile_bytes(checker: Checker, key: str) -> dict[tuple[str, str], int]:
    statuses = {}
    for route, base in ((CHAT, GOOD_CHAT), (MESSAGES, GOOD_MESSAGES), (COUNT, GOOD_MESSAGES)):
        for what, body, headers in proxy_api.raw_bodies(base):
            r = checker.post(prefixed(TRIAL, route), body, key, headers, what=what)
            statuses[(route, what)] = r.status_code if r is not None else 0
    return statuses


def oversized_bodies(url: str, key: str) -> list[str]:
    """A body past the limit, plain or inflated from gzip: 413 before it is tokenized or inflated whole."""
    problems = []
    big = b'{"model":"policy","messages":[{"role":"user","content":"' + b"a" * BODY_LIMIT + b'"}],"max_tokens":4}'
    bomb = gzip.compress(big, compresslevel=6)  # ~50 KB that inflate past the limit
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        for what, body, extra in (("plain", big, {}), ("gzip", bomb, {"content-encoding": "gzip"})):
            try:
                r = client.post(prefixed(TRIAL, CHAT), content=body, headers={"authorization": f"Bearer {key}",
                                                                              "content-type": "application/json", **extra})
            except httpx.TransportError as exc:
                problems.append(f"{what} body over the limit: {type(exc).__name__} {exc}")
                continue
            if r.status_code != 413:
                problems.append(f"{what} body over the limit: {r.status_code} {r.text[:200]}")
    return problems


def short_body(url: str, key: str) -> list[str]:
    """A body shorter than its Content-Length: answered (408) once the read timeout (10 s) passes."""
    problems = []
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        head = (f"POST {prefixed(TRIAL, CHAT)} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
        sock.sendall(head.encode() + b'{"model":"policy"')
        try:
            answer = sock.recv(4096)
        except TimeoutError:
            answer = b""
        if not answer.startswith((b"HTTP/1.1 408", b"HTTP/1.1 400")):
            problems.append(f"body shorter than its Content-Length: {answer[:200]!r}")
    return problems


LITELLM_ROUTES = ["/v1/completions", "/v1/embeddings", "/engines/policy/chat/completions",
                  "/openai/deployments/policy/chat/completions", "/anthropic/v1/messages", "/key/generate", "/v1/realtime"]


def litellm_routes(checker: Checker, key: str) -> list[int]:
    """LiteLLM's other routes, with a good key and a good body, each three times (three failures
    cooled the replica's deployment down for every trial): all closed."""
    statuses = []
    for path in LITELLM_ROUTES * 3:
        r = checker.post(prefixed(TRIAL, path) if len(statuses) % 2 else path, orjson.dumps(GOOD_CHAT), key, what="LiteLLM route")
        statuses.append(r.status_code if r is not None else 0)
    return statuses


def hostile_headers_and_keys(checker: Checker, trials_dir: Path, key: str) -> dict[str, list[int]]:
    """Headers never move a call to another trial; forged keys and another trial's path are refused."""
    statuses: dict[str, list[int]] = {"headers": [], "keys": [], "no key": [], "end": []}
    for headers in proxy_api.HOSTILE_HEADERS:
        r = checker.post(CHAT, orjson.dumps(GOOD_CHAT), key, headers, what="hostile header")
        statuses["headers"].append(r.status_code if r is not None else 0)
    keys = proxy_api.forged_keys(key, mint("another-secret", RUN, "forged"), mint(SECRET, RUN, "forged", ttl_seconds=10, now=time.time() - 60),
                                 mint(SECRET, RUN, "another-trial"))
    for route, base in ((CHAT, GOOD_CHAT), (MESSAGES, GOOD_MESSAGES), (COUNT, GOOD_MESSAGES)):
        for forged in keys:
            r = checker.post(prefixed("forged", route), orjson.dumps(base), forged, what=f"forged key {forged[:40]!r}")
            statuses["keys"].append(r.status_code if r is not None else 0)
        for headers in ({}, {"x-api-key": "rlst_x.y"}, {"x-rlstack-trial": f"{RUN}/{TRIAL}"}):
            r = checker.post(prefixed("forged", route), orjson.dumps(base), None, headers, what="no key")
            statuses["no key"].append(r.status_code if r is not None else 0)
    good_end = end_token(SECRET, RUN, "forged")
    for forged in (*keys, key, good_end[:-1], good_end + "\u00e9", end_token("another-secret", RUN, "forged"), end_token(SECRET, RUN, TRIAL)):
        r = checker.post(prefixed("forged", "/end"), b"", forged, what=f"forged end token {forged[:40]!r}")
        statuses["end"].append(r.status_code if r is not None else 0)
    return statuses


ROUTING_EVENTS = ("expired", "no longer ready", "missed a probe", "stalled", "quarantined", "router updated", "heartbeat failed")


def routing_events(*services: ServiceProcess) -> str:
    """What the registry, the replica and the proxy said about routing (the last 30 lines): a 503's cause."""
    lines = [f"{svc.name}: {line}" for svc in services for line in svc.log().splitlines() if any(e in line for e in ROUTING_EVENTS)]
    return "\n".join(sorted(lines, key=lambda line: line.split(": ", 1)[1])[-30:])


def test_proxy_survives_the_fuzz_and_keeps_what_it_logged(proxy, replica, registry):
    checker = Checker(proxy.url)
    kept = f"kept-{time.time_ns()}"  # a trial of its own, whatever else this proxy has logged
    kept_key, key = proxy.key(RUN, kept), proxy.key(RUN, TRIAL)
    good_calls(checker, kept_key, kept)
    before = wait_records(proxy.trials_dir, kept, 3)
    bytes_before = {p.name: p.read_bytes() for p in trajectory_files(proxy.trials_dir / RUN / kept)}

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held_open = pool.submit(short_body, proxy.url, key)  # waits out the read timeout beside the rest
        reports = schema_fuzz(proxy.url, key)
        wrong_typed(checker, key)
        continued_conversations(checker, key)
        raw = hostile_bytes(checker, key)
        problems = oversized_bodies(proxy.url, key) + held_open.result()
        keyed = hostile_headers_and_keys(checker, proxy.trials_dir, key)
        closed = litellm_routes(checker, key)

    findings = [str(f) for report in reports for f in report.findings] + checker.findings
    assert all(report.calls > 0 for report in reports)
    assert not findings, (f"routing, as the services logged it:\n{routing_events(registry, replica.sidecar, proxy.service)}\n"
                          f"{len(findings)} findings:\n" + "\n".join(findings[:25]))
    assert not problems, problems
    # Every forged key, expired key, other trial's key on this path and missing key is refused;
    # no header moved a call into another trial.
    assert set(keyed["keys"]) <= {401, 403}, keyed["keys"]
    assert set(keyed["no key"]) == {401}, keyed["no key"]
    assert set(keyed["end"]) == {401}, keyed["end"]
    assert not records(proxy.trials_dir, "forged") and not (proxy.trials_dir / "victim-run").exists()
    assert set(keyed["headers"]) <= {200, 401}, keyed["headers"]  # 401: LiteLLM reads x-litellm-api-key first
    assert set(closed) == {404}, dict(zip(LITELLM_ROUTES * 3, closed, strict=True))
    # What the JSON grammar forbids is a 4xx; gzip the client declares is read.
    for route in (CHAT, MESSAGES, COUNT):
        for what in ("lone high surrogate", "lone low surrogate", "NaN max_tokens", "deep nesting 5000", "invalid utf-8",
                     "truncated gzip", "empty body", "not an object"):
            assert 400 <= raw[(route, what)] < 500, (route, what, raw[(route, what)])
        assert raw[(route, "gzip, declared")] == 200, route

    # Every line the fuzz's calls wrote reads back as a record (text with \x85 or \u2028 was skipped as torn lines).
    fuzzed = end(proxy.url, TRIAL)
    written = sum(len(p.read_bytes().splitlines()) for p in trajectory_files(proxy.trials_dir / RUN / TRIAL))
    assert written > 0 and len(fuzzed["records"]) == written and fuzzed["in_flight"] == 0
    # Nothing logged before the fuzz was lost or rewritten, and a good call still works and is logged.
    for name, data in bytes_before.items():
        assert (proxy.trials_dir / RUN / kept / name).read_bytes().startswith(data)
    good_calls(checker, kept_key, kept)
    after = wait_records(proxy.trials_dir, kept, 6)
    assert [r.request_id for r in after[:3]] == [r.request_id for r in before]
    ended = end(proxy.url, kept)
    assert len(ended["records"]) == 6 and ended["in_flight"] == 0
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200


@pytest.mark.parametrize("route", [CHAT, MESSAGES, COUNT])
def test_count_tokens_and_model_routes_need_a_trial_key(proxy, replica, route):
    """No route that reaches a replica answers a caller without a key (count_tokens did, from the front layer)."""
    body = orjson.dumps(GOOD_CHAT if route == CHAT else GOOD_MESSAGES)
    for path in (route, prefixed("no-key", route)):
        r = httpx.post(f"{proxy.url}{path}", content=body, headers={"content-type": "application/json"}, timeout=60)
        assert r.status_code == 401, (path, r.status_code, r.text)
