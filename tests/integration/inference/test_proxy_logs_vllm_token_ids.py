"""Every call through the proxy lands in its trial's JSONL with the token ids vLLM generated:
OpenAI and Anthropic, streamed and not."""

from __future__ import annotations

import json

import httpx
import pytest

PROMPT = [{"role": "user", "content": "What is 12 + 30?"}]


def sse_data(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def call_openai(proxy, key: str, stream: bool) -> tuple[str, list[int] | None, dict]:
    body = {"model": "hosted_vllm/policy", "messages": PROMPT, "max_tokens": 8, "temperature": 0, "stream": stream}
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)
    assert r.status_code == 200, r.text
    if not stream:
        choice = r.json()["choices"][0]
        return choice["message"]["content"], choice["provider_specific_fields"]["token_ids"], r.json()["usage"]
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks = sse_data(r.text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    ids = next(c["choices"][0]["provider_specific_fields"]["token_ids"] for c in chunks if c["choices"] and "provider_specific_fields" in c["choices"][0])
    return text, ids, {}


def call_anthropic(proxy, key: str, stream: bool) -> tuple[str, list[int] | None, dict]:
    body = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 8, "temperature": 0, "stream": stream,
            "system": [{"type": "text", "text": "You are a calculator."}], "messages": PROMPT}
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219"}
    r = httpx.post(f"{proxy.url}/v1/messages?beta=true", json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    if not stream:
        message = r.json()
        assert message["type"] == "message" and message["role"] == "assistant"
        return "".join(b.get("text", "") for b in message["content"]), None, message["usage"]
    events = sse_data(r.text)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    return text, None, events[0]["message"]["usage"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_logged_ids_are_the_ones_vllm_generated(proxy, replica, api, stream):
    trial = f"{api}-{'stream' if stream else 'plain'}"
    key = proxy.key("ids", trial)
    text, returned_ids, usage = (call_openai if api == "openai" else call_anthropic)(proxy, key, stream)

    [line] = proxy.lines("ids", trial, expect=1)
    assert line["status"] == "ok" and line["api"] == api
    assert line["replica_id"] == "replica-0" and line["answered_by"] == "policy"
    assert line["requested_model"] == ("hosted_vllm/policy" if api == "openai" else "claude-sonnet-4-5-20250929")
    choice = line["choices"][0]
    ids = choice["completion_token_ids"]
    assert 0 < len(ids) == len(choice["completion_logprobs"]) <= 8
    assert all(lp <= 0 for lp in choice["completion_logprobs"])
    if returned_ids is not None:
        assert returned_ids == ids  # the very ids vLLM returned to the client
    # Decoding the logged ids gives back exactly the text the client received.
    decoded = httpx.post(f"{replica.vllm_url}/detokenize", json={"model": "policy", "tokens": ids}).json()["prompt"]
    assert decoded == text
    if api == "openai":
        tokenized = httpx.post(f"{replica.vllm_url}/tokenize",
                               json={"model": "policy", "messages": PROMPT, "add_generation_prompt": True}).json()["tokens"]
        assert line["prompt_token_ids"] == tokenized
    else:
        assert len(line["prompt_token_ids"]) == usage["input_tokens"]
        assert line["request"]["system"][0]["text"] == "You are a calculator."


def test_concurrent_calls_of_one_trial_are_all_logged(proxy):
    import concurrent.futures

    key = proxy.key("ids", "concurrent")
    body = {"model": "policy", "messages": PROMPT, "max_tokens": 4}

    def one(i: int) -> int:
        return httpx.post(f"{proxy.url}/v1/chat/completions", json={**body, "seed": i},
                          headers={"Authorization": f"Bearer {key}"}, timeout=120).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(16))) == [200] * 16
    lines = proxy.lines("ids", "concurrent", expect=16)
    assert len(lines) == 16
    assert all(line["choices"][0]["completion_token_ids"] for line in lines)


def test_health_chain(proxy):
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200
    assert httpx.get(f"{proxy.url}/health/liveliness").status_code == 200
    ready = httpx.get(f"{proxy.url}/health/readiness").json()
    assert ready["ready"] and "replica-0" in ready["replicas"]
    ping = httpx.get(f"{proxy.url}/health/ping", timeout=60).json()
    assert ping["ok"] and ping["model"] == "policy"
    metrics = httpx.get(f"{proxy.url}/metrics").text
    from prometheus_client.parser import text_string_to_metric_families

    calls = [s.labels for f in text_string_to_metric_families(metrics) for s in f.samples if s.name == "rlstack_proxy_calls_total"]
    assert {"api": "openai", "replica": "replica-0", "status": "ok", "policy": "policy"} in calls
    assert "rlstack_proxy_replicas_ready" in metrics
