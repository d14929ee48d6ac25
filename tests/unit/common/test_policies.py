"""The policy table: one policy answers what the proxy always answered; two never share a name."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from rlstack.common.model_families import MODEL_RECORD, ModelFamilyError
from rlstack.common.policies import PolicyRoute, PolicyTable, declared_family, single

CLAUDE = re.compile(r"^(anthropic/)?claude-[A-Za-z0-9._-]+$")
OPENAI = re.compile(r"^(openai/)?(gpt-|codex-|o\d)[A-Za-z0-9._-]*$")
"""The proxy front's rule before policies (``proxy/edge/front.py`` at 8d0735c), kept as the reference."""

NAMES = ["policy", "hosted_vllm/policy", "claude-sonnet-4-5", "anthropic/claude-haiku-4-5", "claude-3-opus-20240229",
         "gpt-5", "openai/gpt-4.1-mini", "codex-mini-latest", "o1", "o3-mini", "o4", "omni", "gpt4", "llama3",
         "policy-2", "hosted_vllm/other", "claude-x y", "claude-a/b", "", "POLICY"]


@pytest.mark.parametrize("kind", ["chat", "messages", "count_tokens", "responses"])
def test_one_policy_answers_exactly_what_the_proxy_always_answered(kind):
    table = single("policy")
    for name in NAMES:
        before = (name in ("policy", "hosted_vllm/policy") or bool(CLAUDE.match(name))
                  or (kind == "responses" and bool(OPENAI.match(name))))
        assert (table.route(name, kind) == "policy") is before, (name, kind)


def team() -> PolicyTable:
    return PolicyTable((PolicyRoute(name="lead", served_names=("claude-sonnet-*", "claude-opus-*")),
                        PolicyRoute(name="helper", served_names=("claude-haiku-*",))))


def test_two_policies_each_answer_their_own_names_and_nothing_else():
    table = team()
    assert table.route("claude-sonnet-4-5", "messages") == "lead"
    assert table.route("anthropic/claude-opus-4-1", "chat") == "lead"
    assert table.route("claude-haiku-4-5", "messages") == "helper"
    assert table.route("helper", "chat") == "helper" and table.route("hosted_vllm/lead", "chat") == "lead"
    assert table.route("claude-3-opus", "messages") is None  # claimed by no one: a 404, never a guess
    assert table.route("gpt-5", "responses") is None
    assert table.served("messages") == {"lead": ["lead", "claude-sonnet-*", "claude-opus-*"], "helper": ["helper", "claude-haiku-*"]}


@pytest.mark.parametrize(("a", "b"), [
    (("claude-*",), ("claude-haiku-*",)),           # a prefix inside another
    (("claude-haiku-4-5",), ("claude-haiku-*",)),   # an exact name a prefix matches
    (("gpt-5",), ("gpt-5",)),                       # the same name twice
    (("helper",), ()),                              # another policy's own name
])
def test_a_name_two_policies_could_answer_is_refused_naming_both(a, b):
    with pytest.raises(ValidationError) as err:
        PolicyTable((PolicyRoute(name="lead", served_names=a), PolicyRoute(name="helper", served_names=b)))
    assert "'lead' claims" in str(err.value) and "'helper' claims" in str(err.value)


def test_a_responses_only_claim_overlapping_another_policys_name_is_refused():
    with pytest.raises(ValidationError, match="gpt-"):
        PolicyTable((PolicyRoute(name="lead", responses_names=("gpt-*",)), PolicyRoute(name="helper", served_names=("gpt-5",))))


def test_bad_tables_are_refused_naming_what_is_wrong():
    with pytest.raises(ValidationError, match="at least one policy"):
        PolicyTable(())
    with pytest.raises(ValidationError, match="each name once"):
        PolicyTable((PolicyRoute(name="lead"), PolicyRoute(name="lead")))
    with pytest.raises(ValidationError, match="name"):
        PolicyRoute(name="not a label value")


def test_a_policy_whose_model_directory_says_another_family_is_refused_naming_both(tmp_path):
    model = tmp_path / "helper-model"
    model.mkdir()
    (model / MODEL_RECORD).write_text(json.dumps({"model_family": "qwen3"}))
    assert declared_family("helper", model, "qwen3").name == "qwen3"
    assert declared_family("helper", model, None).name == "qwen3"  # the directory's own
    with pytest.raises(ModelFamilyError, match="'helper'.*'llama3.1'.*'qwen3'"):
        declared_family("helper", model, "llama3.1")
    silent = tmp_path / "silent"  # nothing to tell by: the declaration stands
    silent.mkdir()
    assert declared_family("lead", silent, "gemma3").name == "gemma3"
