"""The agent warm start's transcripts: built turn by turn exactly as the agent's calls chain."""

from __future__ import annotations

from transformers import AutoTokenizer

from rlstack.agent.tools import tool_schemas
from rlstack.common.contracts.atropos import MASKED
from rlstack.episodes.harbor.make_tasks import generate
from rlstack.modelkit.agent_demo.builtin import encode, solution_commands, transcript


def test_every_family_has_a_transcript_ending_in_submit():
    for spec in generate(7, seed=5):
        messages = transcript(spec)
        calls = [m["tool_calls"][0]["function"]["name"] for m in messages if m["role"] == "assistant"]
        assert calls[-1] == "submit" and calls[:-1] == ["bash"] * len(solution_commands(spec))
    fix = next(s for s in generate(7, seed=5) if s.name.startswith("fix"))
    assert solution_commands(fix)[0] == "cat /app/calc.py"  # read first, then change


def test_encoding_trains_only_the_assistant_turns_and_each_prompt_extends_the_last(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    messages = transcript(generate(7, seed=5)[6])  # fix: three assistant turns
    ids, labels = encode(tokenizer, messages)
    trained = [t for t, label in zip(ids, labels) if label != MASKED]
    turns = tokenizer.decode(trained)
    assert turns.count("<tool_call>") == 3 and turns.count("<|im_end|>") == 3
    assert '"cat /app/calc.py"' in turns and '"name": "submit"' in turns
    # The whole transcript is what the template renders for the finished conversation: no drift.
    rendered = tokenizer.apply_chat_template(messages, tools=tool_schemas(), tokenize=False)
    assert tokenizer.decode(ids) == rendered.rstrip("\n")
