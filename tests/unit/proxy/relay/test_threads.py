"""Token-in's thread table: which head a rendering continues and the exact ids it is sent on."""

from __future__ import annotations

from rlstack.proxy.relay.threads import ThreadTable
from rlstack.proxy.relay.turn_end import ended_on_turn_end, without_turn_end

EOT, NL = 2, 203
SYSTEM = [1, 50, 51, EOT, NL, 1, 60, 61, EOT, NL, 1, 70, NL]  # system, user, generation prompt


def test_a_continued_call_is_sent_on_the_generated_ids_even_when_the_history_renders_differently() -> None:
    table = ThreadTable()
    first = table.plan("t", SYSTEM)
    assert first.splice is None and first.prompt == SYSTEM
    generated = [900, 901, 902, EOT]  # the policy's own split of a word
    table.record("t", "call-1", SYSTEM, first, generated, "stop", eos_stop=True)
    # The agent sends the history back; the template re-renders the reply as other ids (900, 9012).
    tool_turn = [NL, 1, 80, NL, 81, 82, EOT, NL, 1, 70, NL]
    rendered = SYSTEM + [900, 9012, EOT] + tool_turn
    plan = table.plan("t", rendered)
    assert plan.prompt == SYSTEM + generated + tool_turn
    assert plan.splice is not None and plan.splice.onto == "call-1"
    assert plan.splice.prefix_tokens == len(SYSTEM) + len(generated) and plan.splice.tail_tokens == len(tool_turn)
    assert plan.splice.rerendered_exact is False


def test_a_reply_that_opens_with_newlines_is_spliced_though_its_rendering_merges_into_the_generation_prompt() -> None:
    """The generation prompt ends in a newline; re-rendered as history, a reply that starts with
    newlines merges with it into one id, so the new rendering shares the head's rendering only up
    to that last id (a random policy's reply broke its thread this way in CI)."""
    table = ThreadTable()
    table.record("t", "call-1", SYSTEM, table.plan("t", SYSTEM), [NL2 := 5, 900, EOT], "stop", eos_stop=True)
    tool_turn = [NL, 1, 80, NL, 81, 82, EOT, NL, 1, 70, NL]
    rendered = SYSTEM[:-1] + [NL3 := 8050, 900, EOT] + tool_turn  # NL3 = the prompt's newline + the reply's two
    assert NL2 != NL3
    plan = table.plan("t", rendered)
    assert plan.prompt == SYSTEM + [NL2, 900, EOT] + tool_turn
    assert plan.splice is not None and plan.splice.onto == "call-1" and not plan.splice.rerendered_exact


def test_a_thread_chains_over_many_calls_and_the_exact_rerender_is_reported() -> None:
    table = ThreadTable()
    rendered, sent = list(SYSTEM), list(SYSTEM)
    plan = table.plan("t", rendered)
    for turn in range(4):
        reply = [500 + turn, EOT]
        table.record("t", f"c{turn}", rendered, plan, reply, "stop", eos_stop=True)
        sent = sent + reply
        tail = [NL, 1, 80 + turn, EOT, NL, 1, 70, NL]
        rendered = rendered + reply + tail
        plan = table.plan("t", rendered)
        sent = sent + tail
        assert plan.prompt == sent and plan.splice is not None and plan.splice.onto == f"c{turn}"
        assert plan.splice.rerendered_exact


def test_a_cut_reply_is_closed_with_the_turn_end_the_template_renders() -> None:
    table = ThreadTable()
    table.record("other", "x", SYSTEM, table.plan("other", SYSTEM), [7, EOT], "stop", eos_stop=True)  # learns EOT
    plan = table.plan("t", SYSTEM)
    table.record("t", "cut", SYSTEM, plan, [900, 901], "length", eos_stop=False)
    rendered = SYSTEM + [900, 901, EOT, NL, 1, 80, EOT, NL, 1, 70, NL]
    nxt = table.plan("t", rendered)
    assert nxt.prompt == SYSTEM + [900, 901, EOT, NL, 1, 80, EOT, NL, 1, 70, NL]
    assert nxt.splice is not None and nxt.splice.prefix_tokens == len(SYSTEM) + 2 and nxt.splice.tail_tokens == 9


def test_a_reply_cut_at_max_tokens_that_vllm_calls_tool_calls_is_still_a_cut_reply() -> None:
    """vLLM says ``tool_calls`` whenever its parser found a call, also when the reply ran out of
    tokens mid-way; taken at its word, the head would end on an ordinary id, the next rendering
    would not contain it and the thread would break (seen in a built-in agent run)."""
    cut = {"choices": [{"finish_reason": "tool_calls", "stop_reason": None, "token_ids": [900, 901]}]}
    ended = {"choices": [{"finish_reason": "tool_calls", "stop_reason": None, "token_ids": [900, EOT]}]}
    assert not ended_on_turn_end(cut, EOT) and ended_on_turn_end(ended, EOT)
    assert ended_on_turn_end(cut, None)  # no probed turn end: finish_reason is all there is
    assert not ended_on_turn_end({"choices": [{"finish_reason": "length", "token_ids": [900]}]}, EOT)
    # stopped by one of the model's stop ids (gpt-oss: <|call|>), not the template's turn end: ended there
    assert ended_on_turn_end({"choices": [{"finish_reason": "stop", "stop_reason": 902, "token_ids": [900, 902]}]}, EOT)
    assert not ended_on_turn_end({"choices": [{"finish_reason": "stop", "stop_reason": "</x>", "token_ids": [900, 902]}]}, EOT)
    # finished "stop" with no stop_reason: the model's end of sequence, whichever id it is (gpt-oss: <|return|>)
    assert ended_on_turn_end({"choices": [{"finish_reason": "stop", "stop_reason": None, "token_ids": [900, 903]}]}, EOT)

    table = ThreadTable()
    plan = table.plan("t", SYSTEM)
    table.record("t", "cut", SYSTEM, plan, [900, 901], "tool_calls", eos_stop=ended_on_turn_end(cut, EOT))
    # The parser re-serialised the cut call, so the history renders the reply as other ids.
    tool_turn = [NL, 1, 80, EOT, NL, 1, 70, NL]
    nxt = table.plan("t", SYSTEM + [950, 951, EOT] + tool_turn, turn_end=EOT)
    assert nxt.segment is None and nxt.splice is not None and nxt.splice.onto == "cut"
    assert nxt.prompt == SYSTEM + [900, 901, EOT] + tool_turn


MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
CALL = {"role": "assistant", "content": "Let me look.",
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]}


def test_a_reply_that_comes_back_reserialised_is_spliced_and_an_edited_reply_is_a_new_segment() -> None:
    table = ThreadTable()
    table.record("t", "c1", SYSTEM, table.plan("t", SYSTEM, MESSAGES), [900, EOT], "stop", eos_stop=True,
                 messages=MESSAGES, reply=CALL)
    rendered = SYSTEM + [901, EOT, NL, 1, 80, EOT, NL, 1, 70, NL]
    tool = {"role": "tool", "tool_call_id": "x", "content": "a.txt"}
    # LiteLLM's Anthropic round trip: text as parts, another call id, compact JSON.
    echoed = {"role": "assistant", "content": [{"type": "text", "text": "Let me look. "}],
              "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}]}
    assert table.may_continue("t", [*MESSAGES, echoed, tool])
    assert table.plan("t", rendered, [*MESSAGES, echoed, tool]).splice is not None
    summary = {"role": "assistant", "content": "Summary of the work so far."}
    assert not table.may_continue("t", [*MESSAGES, summary, tool]) and table.starts_like("t", [*MESSAGES, summary, tool])
    # After a compaction the history is a summary in place of the first user turn: same setting.
    assert table.starts_like("t", [MESSAGES[0], {"role": "user", "content": "Summary: ..."}])
    edited = table.plan("t", rendered, [*MESSAGES, summary, tool])
    assert edited.splice is None and edited.segment == "history_edited" and edited.prompt == rendered
    assert table.may_continue("t", MESSAGES)  # the same request again: a retry
    assert not table.starts_like("t", [{"role": "system", "content": "a sub-agent"}, {"role": "user", "content": "u"}])
    assert not table.starts_like("t", MESSAGES, tools=[{"type": "function", "function": {"name": "other"}}])


def test_a_side_call_is_a_new_thread() -> None:
    table = ThreadTable()
    table.record("t", "c1", SYSTEM, table.plan("t", SYSTEM), [900, EOT], "stop", eos_stop=True)
    side = [1, 99, EOT, NL, 1, 70, NL]  # another system prompt: a title or a sub-agent
    other = table.plan("t", side)
    assert other.splice is None and other.segment is None


def test_the_same_request_again_is_a_retry_on_the_same_exact_prompt() -> None:
    table = ThreadTable()
    first = table.plan("t", SYSTEM)
    table.record("t", "c1", SYSTEM, first, [900, EOT], "stop", eos_stop=True)
    rendered = SYSTEM + [900, EOT, NL, 1, 80, EOT, NL, 1, 70, NL]
    second = table.plan("t", rendered)
    table.record("t", "c2", rendered, second, [901, EOT], "stop", eos_stop=True)
    again = table.plan("t", rendered)
    assert again.prompt == second.prompt and again.splice is not None and again.splice.retry


def test_trials_are_independent_and_ended_trials_forget_their_threads() -> None:
    table = ThreadTable()
    table.record("a", "c1", SYSTEM, table.plan("a", SYSTEM), [900, EOT], "stop", eos_stop=True)
    rendered = SYSTEM + [900, EOT, NL, 1, 70, NL]
    assert table.plan("b", rendered).splice is None
    assert table.plan("a", rendered).splice is not None
    table.end("a")
    assert not table.has("a") and table.plan("a", rendered).splice is None


def test_the_table_is_bounded_in_trials() -> None:
    table = ThreadTable(max_trials=3)
    for n in range(10):
        table.record(f"t{n}", "c", SYSTEM, table.plan(f"t{n}", SYSTEM), [900, EOT], "stop", eos_stop=True)
    assert len(table.trials) == 3 and table.has("t9") and not table.has("t0")


def test_derender_is_given_each_reply_without_the_turn_end_it_stopped_on():
    """The text an agent reads leaves the stop token out, as vLLM's own chat route does; a reply cut at
    max_tokens, stopped by a stop string, or made of the turn end alone keeps every id."""
    lp = {"content": [{"token": "a", "logprob": -1.0}, {"token": "b", "logprob": -2.0}]}
    generated = {"request_id": "r", "choices": [
        {"index": 0, "token_ids": [900, EOT], "finish_reason": "stop", "stop_reason": None, "logprobs": lp},
        {"index": 1, "token_ids": [900, 901], "finish_reason": "length", "stop_reason": None},
        {"index": 2, "token_ids": [900, EOT], "finish_reason": "stop", "stop_reason": "</x>"},
        {"index": 3, "token_ids": [EOT], "finish_reason": "stop", "stop_reason": None}]}
    shown = without_turn_end(generated, EOT)
    assert [c["token_ids"] for c in shown["choices"]] == [[900], [900, 901], [900, EOT], [EOT]]
    assert shown["choices"][0]["logprobs"] == lp and shown["request_id"] == "r"
    assert generated["choices"][0]["token_ids"] == [900, EOT]  # the answer's own ids stay whole
    assert without_turn_end(generated, None) == generated
