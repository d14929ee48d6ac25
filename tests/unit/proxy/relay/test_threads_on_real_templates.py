"""Token-in on a real family's template: Qwen3's generation prompt with thinking off ends in an
empty think block that the same turn, rendered as history, does not have. Before the history was
cut at the rendering's last end-of-turn id, every such continuation started a thread of its own."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from rlstack.common.model_families import FAMILIES
from rlstack.proxy.relay.threads import ThreadTable
from rlstack.proxy.relay.turn_end import turn_end_after_reply

BASH = {"type": "function", "function": {"name": "Bash", "description": "Run a command.",
                                         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def qwen3():
    return AutoTokenizer.from_pretrained(FAMILIES["qwen3"].tokenizer_dir())


def call(n: int, command: str, reasoning: str | None = None) -> dict:
    return {"role": "assistant", "content": "", **({"reasoning_content": reasoning} if reasoning else {}),
            "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": "Bash", "arguments": {"command": command}}}]}


@pytest.mark.parametrize(("thinking", "sent_back", "drift"), [(False, False, True), (True, True, False), (True, False, True)],
                         ids=["no-thinking", "thinking-sent-back", "thinking-dropped"])
def test_a_qwen3_tool_loop_is_one_thread_with_thinking_on_or_off(qwen3, thinking, sent_back, drift):
    """No thinking: the empty think block the policy was prompted with is gone from the history. Thinking,
    with the reasoning sent back (chat ``reasoning_content``): kept after the last user turn, the history
    renders exactly. Thinking dropped by the agent: the history lacks it. One thread each time."""
    def render(messages: list[dict]) -> list[int]:
        return qwen3.apply_chat_template(messages, tools=[BASH], add_generation_prompt=True, tokenize=True,
                                         enable_thinking=thinking, return_dict=False)

    table = ThreadTable()
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Sum the numbers."}]
    sent: list[int] = []
    drifted = []
    for turn, command in enumerate(["cat /app/numbers.txt", "echo 6 > /app/answer.txt"]):
        rendered = render(messages)
        plan = table.plan("t", rendered, messages)
        if turn:
            assert plan.splice is not None and plan.splice.onto == f"r{turn - 1}", "the loop broke its thread"
            assert plan.prompt[:len(sent)] == sent  # the policy's ids, never re-tokenised
            drifted.append(not plan.splice.rerendered_exact)
        think = "<think>\nI look first.\n</think>\n\n" if thinking else ""
        reply = f'{think}<tool_call>\n{{"name": "Bash", "arguments": {{"command": "{command}"}}}}\n</tool_call><|im_end|>'
        completion = qwen3(reply, add_special_tokens=False)["input_ids"]
        table.record("t", f"r{turn}", rendered, plan, completion, "tool_calls", eos_stop=True, messages=messages,
                     reply=call(turn, command))
        sent = plan.prompt + completion
        back = call(turn, command, "I look first." if sent_back else None)
        messages = [*messages, back, {"role": "tool", "tool_call_id": f"c{turn}", "content": "1 2 3"}]
    assert drifted == [drift]


@pytest.mark.parametrize("thinking", [True, False])
def test_the_turn_end_is_probed_after_the_reply_not_after_the_generation_prompt(qwen3, thinking):
    """Qwen3 with thinking on renders an empty think block into the last assistant turn, which its
    generation prompt lacks: the probe that compared the two took ``<think>`` for the end of a turn,
    so no reply ever ended on it and no continued call of a non-streaming agent was spliced."""
    def render(reply: str) -> list[int]:
        return qwen3.apply_chat_template([{"role": "user", "content": "x"}, {"role": "assistant", "content": reply}],
                                         tokenize=True, enable_thinking=thinking, return_dict=False)

    assert turn_end_after_reply(render("x"), render("y")) == qwen3.convert_tokens_to_ids("<|im_end|>")
    assert turn_end_after_reply(render("x"), render("x")) is None


@pytest.fixture(scope="module")
def deepseek():
    return AutoTokenizer.from_pretrained(FAMILIES["deepseek-v3"].tokenizer_dir())


def test_a_deepseek_v3_tool_loop_is_one_thread_though_its_template_drops_the_calls(deepseek):
    """DeepSeek V3's shipped template renders a tool call only for an assistant message whose content is
    None, which vLLM never passes it (it renders "" there): every call the policy made renders as an empty
    reply. The history drifts on every turn, and token-in keeps the calls the policy really made."""
    eos = deepseek.convert_tokens_to_ids("<｜end▁of▁sentence｜>")

    def render(messages: list[dict], generation_prompt: bool = True) -> list[int]:
        as_vllm = [{**m, "content": m.get("content") or ""} for m in messages]
        return deepseek.apply_chat_template(as_vllm, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False)

    def deepseek_call(n: int, command: str) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": "Bash", "arguments": f'{{"command": "{command}"}}'}}]}

    assert turn_end_after_reply(render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "x"}], False),
                                render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], False)) == eos
    table = ThreadTable()
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Sum the numbers."}]
    sent: list[int] = []
    drifted = []
    for turn, command in enumerate(["cat /app/numbers.txt", "echo 6 > /app/answer.txt", "cat /app/answer.txt"]):
        rendered = render(messages)
        assert "tool▁call▁begin" not in deepseek.decode(rendered)  # the history has lost every call
        plan = table.plan("t", rendered, messages, eos)
        if turn:
            assert plan.splice is not None and plan.splice.onto == f"r{turn - 1}", f"turn {turn} broke its thread"
            assert plan.prompt[:len(sent)] == sent
            drifted.append(not plan.splice.rerendered_exact)
        reply = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>Bash\n```json\n"
                 f'{{"command": "{command}"}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>')
        completion = deepseek(reply, add_special_tokens=False)["input_ids"]
        table.record("t", f"r{turn}", rendered, plan, completion, "tool_calls", eos_stop=True, messages=messages,
                     reply=deepseek_call(turn, command))
        sent = plan.prompt + completion
        messages = [*messages, deepseek_call(turn, command), {"role": "tool", "tool_call_id": f"c{turn}", "content": "1 2 3"}]
    assert drifted == [True, True]
    assert deepseek.decode(sent).count("<｜tool▁call▁begin｜>") == 3  # the sequence trained holds every call


def test_a_reply_rendered_with_no_end_of_turn_is_placed_by_the_rendering_through_it():
    """``splice_through``: what the proxy does when no end of turn follows the reply in the new rendering
    (gpt-oss's final answer is generated closed by ``<|return|>``, rendered closed by ``<|end|>``)."""
    table = ThreadTable()
    table.record("t", "r0", [1, 2, 3], table.plan("t", [1, 2, 3]), [7, 8], "stop", eos_stop=True)
    head = table.trials["t"].heads[0]
    assert table.splice_through(head, [1, 2, 3, 9, 9, 5], [1, 2, 3, 7, 7]).segment == "no_turn_end"  # not its start
    assert table.splice_through(head, [1, 2, 3, 9, 9, 5], [1, 2]).segment == "no_turn_end"  # ends inside the history
    plan = table.splice_through(head, [1, 2, 3, 9, 9, 5], [1, 2, 3, 9, 9])
    assert plan.prompt == [1, 2, 3, 7, 8, 5] and plan.splice.onto == "r0" and not plan.splice.rerendered_exact
    # harmony's renderer adds the generation prompt (4) even when asked not to: cut at the last turn end (9)
    assert table.splice_through(head, [1, 2, 3, 9, 9, 5], [1, 2, 3, 9, 9, 4]).segment == "no_turn_end"
    assert table.splice_through(head, [1, 2, 3, 9, 9, 5], [1, 2, 3, 9, 9, 4], turn_end=9).prompt == [1, 2, 3, 7, 8, 5]
