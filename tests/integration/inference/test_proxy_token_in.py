"""Token-in through the real proxy and vLLM: every continued call of a trial is sent on the exact
ids its thread generated, in both dialects, streamed or not, and its calls assemble into one
sequence whatever the template's re-rendering of the history would have given."""

from __future__ import annotations

import json

import httpx
import pytest

from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.episodes.assemble import assemble

TOOLS_OPENAI = [{"type": "function", "function": {"name": "bash", "description": "Run a command",
                 "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]
TOOLS_ANTHROPIC = [{"name": "bash", "description": "Run a command",
                    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def openai_turn(proxy, key: str, messages: list[dict], stream: bool) -> dict:
    body = {"model": "policy", "messages": messages, "tools": TOOLS_OPENAI, "max_tokens": 12, "stream": stream}
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)
    assert r.status_code == 200, r.text
    if not stream:
        message = r.json()["choices"][0]["message"]
        return {k: v for k, v in message.items() if k in ("role", "content", "tool_calls") and v is not None}
    deltas = [c["choices"][0]["delta"] for c in sse_events(r.text) if c["choices"]]
    message: dict = {"role": "assistant", "content": "".join(d.get("content") or "" for d in deltas)}
    calls = [call for d in deltas for call in d.get("tool_calls") or []]
    if calls:  # a random policy may emit the tool-call marker: send the call back as the client would
        message["tool_calls"] = [{"id": c["id"], "type": "function", "function": c["function"]} for c in calls]
    return message


def anthropic_turn(proxy, key: str, messages: list[dict], stream: bool) -> dict:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 12, "stream": stream, "tools": TOOLS_ANTHROPIC,
            "system": [{"type": "text", "text": "You are an agent."}], "messages": messages}
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    r = httpx.post(f"{proxy.url}/v1/messages?beta=true", json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    if not stream:
        return {"role": "assistant", "content": r.json()["content"]}
    text = "".join(e["delta"].get("text", "") for e in sse_events(r.text) if e["type"] == "content_block_delta")
    return {"role": "assistant", "content": [{"type": "text", "text": text}] if text else []}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_continued_calls_are_sent_on_their_threads_exact_ids(proxy, api, stream):
    run, trial = "tokenin", f"{api}-{'stream' if stream else 'plain'}"
    key = proxy.key(run, trial)
    messages: list[dict] = [{"role": "user", "content": "List the files."}]
    if api == "openai":
        messages.insert(0, {"role": "system", "content": "You are an agent."})
    turn = openai_turn if api == "openai" else anthropic_turn
    for n in range(4):
        reply = turn(proxy, key, messages, stream)
        if api == "anthropic" and not reply["content"]:
            reply["content"] = [{"type": "text", "text": ""}]
        messages += [reply, {"role": "user", "content": f"Output of step {n}: a.txt b.txt"}]

    records = proxy.lines(run, trial, expect=4)
    assert [r["status"] for r in records] == ["ok"] * 4
    assert records[0]["splice"] is None
    for before, after in zip(records, records[1:], strict=False):
        exact = before["prompt_token_ids"] + before["choices"][0]["completion_token_ids"]
        assert after["prompt_token_ids"][: len(exact)] == exact  # the history is the ids vLLM generated
        splice = after["splice"]
        assert splice["onto"] == before["request_id"] and splice["prefix_tokens"] == len(exact)
        assert splice["tail_tokens"] == len(after["prompt_token_ids"]) - len(exact) > 0
        assert after["usage"]["prompt_tokens"] == len(after["prompt_token_ids"])  # derender alone counted 0
        assert after["usage"]["completion_tokens"] == len(after["choices"][0]["completion_token_ids"])
    assembly = assemble(read_trajectory(proxy.trials_dir / run / trial))
    assert len(assembly.sequences) == 1 and assembly.thread_breaks == 0 and assembly.merge_share == 1.0
    assert assembly.spliced_calls == 3
    [sequence] = assembly.sequences
    generated = [t for r in records for t in r["choices"][0]["completion_token_ids"]]
    assert [t for t, m in zip(sequence.tokens, sequence.masks, strict=True) if m != -100] == generated


def test_an_edited_history_starts_a_new_segment_rendered_as_sent(proxy, replica):
    run, trial = "tokenin", "edited"
    key = proxy.key(run, trial)
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]
    reply = openai_turn(proxy, key, messages, stream=False)
    # The agent replaces the policy's reply with its own summary (what a compaction does).
    edited = [*messages, {"role": "assistant", "content": "Summary: nothing done yet."}, {"role": "user", "content": "Go on."}]
    openai_turn(proxy, key, edited, stream=False)
    first, second = proxy.lines(run, trial, expect=2)
    assert reply and second["splice"] is None and second["segment"] == "history_edited"
    rendered = httpx.post(f"{replica.vllm_url}/tokenize", json={"model": "policy", "messages": edited, "tools": TOOLS_OPENAI,
                                                                 "add_generation_prompt": True}).json()["tokens"]
    assert second["prompt_token_ids"] == rendered  # the agent's own history, rendered, never spliced over


def test_ending_a_trial_hands_back_every_call_and_only_to_the_env(proxy):
    from rlstack.common.contracts.trial_end import TrialEnd, end_token
    from tests.integration.inference.conftest import SECRET

    run, trial = "tokenin", "ended"
    key = proxy.key(run, trial)
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]
    for n in range(3):
        messages += [openai_turn(proxy, key, messages, stream=False), {"role": "user", "content": f"step {n}"}]
    url = f"{proxy.url}/trials/{run}/{trial}/end"
    # The agent holds its trial key, not the end token: it can neither end its trial nor read it back.
    assert httpx.post(url, headers={"Authorization": f"Bearer {key}"}).status_code == 401
    assert httpx.post(url, headers={"Authorization": f"Bearer {end_token(SECRET, run, 'other')}"}).status_code == 401
    reply = httpx.post(url, headers={"Authorization": f"Bearer {end_token(SECRET, run, trial)}"}, timeout=60)
    assert reply.status_code == 200, reply.text
    ended = TrialEnd.model_validate_json(reply.content)
    assert ended.in_flight == 0 and len(ended.records) == 3  # at once: no waiting for files to settle
    assert [r.request_id for r in ended.records] == [r.request_id for r in read_trajectory(proxy.trials_dir / run / trial)]
    # The trial's threads are forgotten: a late call is not spliced onto them.
    openai_turn(proxy, key, messages, stream=False)
    assert proxy.lines(run, trial, expect=4)[-1]["splice"] is None


def test_litellms_own_streaming_passes_through_the_relay(registry, replica, stack_logs, tmp_path):
    """``--stream-mode litellm`` streams upstream: the relay passes vLLM's events through as they come."""
    from tests.conftest import PROXY_PYTHON, start_service

    native = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(tmp_path / "trials"),
                                     "--stream-mode", "litellm", "--max-tokens-cap", "16"],
                           stack_logs, python=PROXY_PYTHON, ready_timeout=180)
    try:
        body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
        r = httpx.post(f"{native.url}/trials/tokenin/native/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        chunks = [c for c in sse_events(r.text) if c.get("choices")]
        assert chunks and r.text.rstrip().endswith("data: [DONE]")
    finally:
        native.terminate()
