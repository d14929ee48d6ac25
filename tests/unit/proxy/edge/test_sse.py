import json

from rlstack.proxy.edge.sse import anthropic_events, loads, openai_chunks


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
