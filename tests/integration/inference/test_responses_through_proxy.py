"""OpenAI's Responses API through the real proxy and vLLM, as codex speaks it: the conversation replayed
in ``input`` each turn, tool calls and their outputs as items, streamed or not. Every call lands in
the trial's records on vLLM's exact ids, and every continued call goes out spliced onto them."""

from __future__ import annotations

import json

import httpx
import pytest

from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.episodes.assemble import assemble

TOOLS = [{"type": "function", "name": "shell", "description": "Run a command",
          "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}]


def respond(proxy, run: str, trial: str, items: list[dict], stream: bool) -> dict:  # noqa: ANN001
    body = {"model": "gpt-5-codex", "instructions": "You are a coding agent.", "input": items, "tools": TOOLS,
            "max_output_tokens": 12, "stream": stream, "store": False}
    r = httpx.post(f"{proxy.url}/trials/{run}/{trial}/v1/responses", json=body,
                   headers={"Authorization": f"Bearer {proxy.key(run, trial)}"}, timeout=120)
    assert r.status_code == 200, r.text
    if not stream:
        return r.json()
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[0]["type"] == "response.created" and events[-1]["type"] in ("response.completed", "response.incomplete")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events[-1]["response"]


def text_of(response: dict) -> str:
    return "".join(part["text"] for item in response["output"] if item["type"] == "message"
                   for part in item["content"] if part["type"] == "output_text")


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_codex_style_conversation_is_recorded_on_exact_ids_and_spliced(proxy, replica, stream):
    run, trial = "responses", f"codex-{'stream' if stream else 'plain'}"
    items = [user("List the files.")]
    answers = []
    for turn in range(3):
        answer = respond(proxy, run, trial, items, stream)
        answers.append(answer)
        items = [*items, *answer["output"], user(f"Go on ({turn}).")]
    proxy.lines(run, trial, expect=3)  # the writer thread has them all
    records = read_trajectory(proxy.trials_dir / run / trial)
    assert [r.api for r in records] == ["responses"] * 3 and all(r.status == "ok" for r in records)
    assert all(r.requested_model == "gpt-5-codex" and r.answered_by == "policy" for r in records)
    assert all(r.streamed == stream for r in records)  # the edge answered the stream; the record says it was one
    for record, answer in zip(records, answers, strict=True):
        ids = record.choices[0].completion_token_ids
        assert len(ids) == len(record.choices[0].completion_logprobs) > 0
        decoded = httpx.post(f"{replica.vllm_url}/detokenize", json={"model": "policy", "tokens": ids}).json()["prompt"]
        assert decoded.startswith(text_of(answer)) or text_of(answer) == ""  # what the client read: vLLM's own ids
        assert record.request["input"] and record.request["instructions"] == "You are a coding agent."
    assert [r.splice is not None for r in records] == [False, True, True]  # every continued call on exact ids
    assembled = assemble(records)
    assert len(assembled.sequences) == 1 and assembled.thread_breaks == 0 and assembled.merged_calls == 2


def test_tool_calls_and_their_outputs_reach_the_model_as_the_bridge_renders_them(proxy, replica):
    run, trial = "responses", "tool-items"
    items = [user("List the files."),
             {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": json.dumps({"command": ["ls"]})},
             {"type": "function_call_output", "call_id": "call_1", "output": "alpha.txt beta.txt"}]
    respond(proxy, run, trial, items, stream=False)
    proxy.lines(run, trial, expect=1)
    [record] = read_trajectory(proxy.trials_dir / run / trial)
    prompt = httpx.post(f"{replica.vllm_url}/detokenize", json={"model": "policy", "tokens": record.prompt_token_ids}).json()["prompt"]
    assert "alpha.txt beta.txt" in prompt and "shell" in prompt and "You are a coding agent." in prompt


def test_unknown_items_and_server_state_are_refused_by_name_and_cool_nothing_down(proxy):
    run, trial = "responses", "refused"
    headers = {"Authorization": f"Bearer {proxy.key(run, trial)}"}
    url = f"{proxy.url}/trials/{run}/{trial}/v1/responses"
    for _ in range(3):  # three failures in a row used to cool a replica's deployment down for every trial
        r = httpx.post(url, json={"model": "gpt-5", "input": [{"type": "computer_call", "id": "c"}]}, headers=headers, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "input.0.type", r.text
    r = httpx.post(url, json={"model": "gpt-5", "input": "hi", "previous_response_id": "resp_1"}, headers=headers, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"
    assert respond(proxy, run, trial, [user("hi")], stream=False)["object"] == "response"


def test_a_first_call_near_the_context_gets_the_room_its_prompt_leaves(proxy, replica):
    """The edge cannot count a Responses prompt (it becomes chat messages inside LiteLLM's bridge);
    the relay counts it exactly: a limit past the context is cut to the room left, not a vLLM 400,
    and a long prompt with room to spare is not cut by its bytes (a bound that gave codex 16 tokens)."""
    context = httpx.get(f"{replica.vllm_url}/v1/models").json()["data"][0]["max_model_len"]

    def prompt_tokens(text: str) -> int:
        messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": text}]
        body = {"model": "policy", "messages": messages, "add_generation_prompt": True}
        return httpx.post(f"{replica.vllm_url}/tokenize", json=body, timeout=60).json()["count"]

    word = " apple"
    per_word = (prompt_tokens(word * 200) - prompt_tokens(word * 100)) / 100
    text = word * int((context - 40 - prompt_tokens("")) / per_word)
    while prompt_tokens(text) > context - 20:
        text = text[: -len(word) * 5]
    room = context - prompt_tokens(text)
    assert 20 <= room < 64 and len(text) > context  # more bytes than the context, fewer tokens

    run, trial = "responses", "near-the-context"
    body = {"model": "gpt-5-codex", "instructions": "You are a coding agent.", "input": [user(text)],
            "max_output_tokens": 64, "store": False, "temperature": 0}
    r = httpx.post(f"{proxy.url}/trials/{run}/{trial}/v1/responses", json=body,
                   headers={"Authorization": f"Bearer {proxy.key(run, trial)}"}, timeout=300)
    assert r.status_code == 200, r.text
    proxy.lines(run, trial, expect=1)
    [record] = read_trajectory(proxy.trials_dir / run / trial)
    assert record.request["max_output_tokens"] == 64  # the edge left the limit to the relay's count
    assert len(record.prompt_token_ids) == context - room
    assert 0 < len(record.choices[0].completion_token_ids) <= room
