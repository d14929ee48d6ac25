"""Wrong key, wrong trial, wrong model, malformed body: each a clear 4xx, nothing logged."""

from __future__ import annotations

import time

import httpx

from rlstack.common.trial_keys import mint
from tests.integration.inference.conftest import SECRET

BODY = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def post(proxy, path="/v1/chat/completions", key=None, headers=None, **kwargs):
    headers = {**(headers or {}), **({"Authorization": f"Bearer {key}"} if key else {})}
    return httpx.post(f"{proxy.url}{path}", headers=headers, timeout=60, **kwargs)


def test_missing_forged_and_expired_keys_are_401(proxy):
    assert post(proxy, json=BODY).status_code == 401
    assert post(proxy, json=BODY, key=mint("another-secret", "r", "t")).status_code == 401
    expired = post(proxy, json=BODY, key=mint(SECRET, "r", "t", ttl_seconds=10, now=time.time() - 60))
    assert expired.status_code == 401 and "expired" in expired.text


def test_path_naming_another_trial_is_403(proxy):
    r = post(proxy, path="/trials/r/other/v1/chat/completions", json=BODY, key=proxy.key("r", "t"))
    assert r.status_code == 403


def test_unknown_model_is_404_naming_served_models(proxy):
    r = post(proxy, json={**BODY, "model": "gpt-4o"}, key=proxy.key("r", "t"))
    assert r.status_code == 404
    assert "'gpt-4o' is not served here" in r.json()["error"]["message"] and "policy" in r.json()["error"]["message"]
    r = post(proxy, path="/v1/messages", json={**BODY, "model": "gpt-4o"}, key=proxy.key("r", "t"))
    assert r.status_code == 404 and r.json()["type"] == "error"  # Anthropic's error shape on its route


def test_malformed_bodies_are_400_naming_the_field(proxy):
    key = proxy.key("r", "t")
    r = post(proxy, content=b"{not json", key=key, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.text
    r = post(proxy, json={"messages": BODY["messages"]}, key=key)
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"


def test_oversized_prompt_is_a_clear_400(proxy):
    long_prompt = "word " * 40_000  # far past the 32k context
    r = post(proxy, json={**BODY, "messages": [{"role": "user", "content": long_prompt}], "max_tokens": 64}, key=proxy.key("r", "t"))
    assert r.status_code == 400 and "context holds" in r.text


def test_count_tokens_answers_from_the_model_tokenizer(proxy, replica):
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "What is 12 + 30?"}]}
    r = post(proxy, path="/v1/messages/count_tokens?beta=true", json=body, key=proxy.key("r", "t"))
    assert r.status_code == 200
    direct = httpx.post(f"{replica.vllm_url}/v1/messages/count_tokens", json={**body, "model": "policy"}).json()
    assert r.json()["input_tokens"] == direct["input_tokens"] > 0
