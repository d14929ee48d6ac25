import json

from rlstack.proxy.edge.sse import anthropic_events, openai_chunks, responses_events
from rlstack.proxy.jsonio import loads


def parse(events: bytes) -> list[tuple[str | None, dict | str]]:
    out = []
    for block in events.decode().strip().split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
        out.append((name, data))
    return out


def test_openai_chunks_carry_content_tool_calls_finish_and_usage():
    response = {"id": "c1", "created": 1, "model": "policy", "usage": {"completion_tokens": 2},
                "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": {"content": [{"logprob": -1.0}]},
                             "message": {"role": "assistant", "content": "hi",
                                         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]}}]}
    events = parse(b"".join(openai_chunks(response, include_usage=True)))
    assert events[0][1]["choices"][0]["delta"] == {"role": "assistant", "content": "hi"}
    assert events[1][1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "Bash"
    assert events[2][1]["choices"][0]["finish_reason"] == "tool_calls"
    assert events[3][1]["usage"] == {"completion_tokens": 2}
    assert events[-1][1] == "[DONE]"


def test_anthropic_events_follow_the_documented_sequence():
    message = {"id": "m1", "type": "message", "role": "assistant", "model": "policy", "stop_reason": "tool_use",
               "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 3},
               "content": [{"type": "thinking", "thinking": "hm", "signature": "sig"}, {"type": "text", "text": "ok"},
                           {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"command": "ls"}}]}
    events = parse(b"".join(anthropic_events(message)))
    names = [n for n, _ in events]
    assert names == ["message_start",
                     "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    assert events[0][1]["message"]["usage"] == {"input_tokens": 5, "output_tokens": 0}
    assert json.loads(events[9][1]["delta"]["partial_json"]) == {"command": "ls"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" and events[-2][1]["usage"]["output_tokens"] == 3


def test_lone_surrogates_from_half_characters_survive():
    answer = loads(b'{"content":[{"type":"text","text":"\\udcff!"}],"usage":{}}')
    assert b"\\udcff!" in b"".join(anthropic_events(answer))


def test_responses_events_follow_the_documented_sequence():
    response = {"id": "resp_1", "object": "response", "model": "policy", "status": "completed", "usage": {"output_tokens": 4},
                "output": [{"type": "reasoning", "id": "rs_1", "summary": []},
                           {"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "ls", "annotations": []}]},
                           {"type": "function_call", "id": "f1", "call_id": "c1", "name": "shell", "arguments": "{\"command\": [\"ls\"]}",
                            "status": "completed"}]}
    events = parse(b"".join(responses_events(response)))
    assert [n for n, _ in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed"]
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert events[0][1]["response"]["output"] == [] and events[0][1]["response"]["status"] == "in_progress"
    assert events[6][1]["delta"] == "ls" and events[12][1]["arguments"] == '{"command": ["ls"]}'
    assert events[-1][1]["response"] == response
    cut = parse(b"".join(responses_events({**response, "status": "incomplete", "output": []})))
    assert cut[-1][0] == "response.incomplete"
