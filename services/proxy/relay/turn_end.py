"""The end of a turn: which id the template closes an assistant turn with, and whether a reply
ended on it (the policy finished its turn) or was cut (a stop string, ``max_tokens``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def turn_end_after_reply(x: Sequence[int], y: Sequence[int]) -> int | None:
    """The end-of-turn id, from one conversation rendered with the reply "x" and with the reply "y":
    the renderings differ in one id (the reply), and the id after it ends the turn. None when they
    differ otherwise, or nothing follows the reply."""
    if len(x) != len(y):
        return None
    differ = [i for i, (a, b) in enumerate(zip(x, y)) if a != b]
    if len(differ) != 1 or differ[0] + 1 >= len(x):
        return None
    return x[differ[0] + 1]


def ended_on_turn_end(answer: dict[str, Any], turn_end: int | None) -> bool:
    """A reply that ended on the model's own end-of-turn token (not a stop string, not length).

    ``finish_reason`` alone cannot say so: vLLM reports ``tool_calls`` whenever its parser found a
    call, also in a reply cut at ``max_tokens`` (its last id is then an ordinary token). With the
    template's end-of-turn id known, the last generated id must be it."""
    choices = answer.get("choices") or []
    return bool(choices) and choice_ended_on_turn_end(choices[0], turn_end)


def choice_ended_on_turn_end(choice: dict[str, Any], turn_end: int | None) -> bool:
    """``ended_on_turn_end`` for one choice. A reply stopped by one of the model's stop ids (vLLM's
    ``stop_reason`` is then that id: gpt-oss closes a tool call with ``<|call|>``, a turn the
    template renders closed by ``<|end|>``) ended its turn on that id; one that finished ``stop``
    with no ``stop_reason`` ended on the model's end of sequence (gpt-oss: ``<|return|>``)."""
    stop, reason = choice.get("stop_reason"), choice.get("finish_reason")
    if reason not in ("stop", "tool_calls") or isinstance(stop, str):
        return False
    ids = choice.get("token_ids") or []
    if isinstance(stop, int):
        return not ids or ids[-1] == stop
    if stop is not None:
        return False
    if turn_end is None or reason == "stop":
        return True
    return not ids or ids[-1] == turn_end  # "tool_calls" hides a cut reply: the last id tells


def without_turn_end(generated: dict[str, Any], turn_end: int | None) -> dict[str, Any]:
    """A generate answer to derender, each choice that ended on its end-of-turn id without that id.

    vLLM's derender decodes every id it is given, special ones kept when a tool parser is on, so a
    spliced reply read ``Done.<|im_end|>`` where vLLM's own chat route answers ``Done.`` (it leaves a
    stop token out of the text). Only the text changes: the caller keeps the ids and logprobs."""
    choices = []
    for choice in generated.get("choices") or []:
        ids = choice.get("token_ids") or []
        if turn_end is not None and len(ids) > 1 and choice_ended_on_turn_end(choice, turn_end):
            choice = {**choice, "token_ids": ids[:-1]}
        choices.append(choice)
    return {**generated, "choices": choices}
