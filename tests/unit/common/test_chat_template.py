"""The demo model's chat template renders every content shape agents and vLLM send."""

import jinja2
import pytest

from rlstack.modelkit.tiny import TEMPLATE


def render(messages, tools=None):
    env = jinja2.Environment()
    env.filters["tojson"] = lambda v: __import__("json").dumps(v)
    return env.from_string(TEMPLATE.read_text()).render(messages=messages, tools=tools, add_generation_prompt=True)


@pytest.mark.parametrize("content", ["Be brief.", [{"type": "text", "text": "Be brief."}]])
def test_system_text_survives_string_and_part_lists(content):
    out = render([{"role": "system", "content": content}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert "<|im_start|>system\nBe brief.<|im_end|>" in out and "<|im_start|>user\nhi<|im_end|>" in out
    assert out.endswith("<|im_start|>assistant\n")


def test_tools_and_system_parts_are_both_rendered():
    out = render([{"role": "system", "content": [{"type": "text", "text": "You are Claude Code."}]}, {"role": "user", "content": "x"}],
                 tools=[{"type": "function", "function": {"name": "Bash"}}])
    assert "You are Claude Code." in out and '"name": "Bash"' in out
