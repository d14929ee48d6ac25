"""Which earlier call a trial's new call continues, and the exact ids to send it on (token-in).

An agent resends its whole conversation each turn. Rendering that history through the chat
template again need not give back the ids the policy generated (a word sampled as a
non-canonical split, tool-call JSON re-serialised by LiteLLM's Anthropic round trip), and a
sequence whose history drifted cannot be trained as one. So the proxy keeps, per trial, the
*head* of every thread: the exact ids it sent (prompt) and got back (completion) on the
thread's latest call, plus a fingerprint of what that call's request rendered to.

A new call continues a head when its own rendering starts with the head's rendering (same
tools, system prompt and history up to the head's reply, byte for byte after the template),
less the generation prompt: everything after the rendering's last end-of-turn id (``stable_cut``).
The generation prompt is not history: Qwen3 with thinking off ends it with an empty think block
that the same turn, rendered as history, does not have; other templates' last id merges with
the reply's first characters. The new prompt is then the head's exact ids + everything the
template renders after the re-rendered reply's turn-end token (tool results, the next user
turn, the generation prompt). Only that tail comes from rendering; the history is never re-tokenised.

The reply in the new request must still say what the policy said (same text and tool calls,
compared after parsing, so re-serialised JSON or a dropped empty text block is no edit);
if the agent changed it, the history is the agent's, not the policy's, and is not spliced.

A call that continues no head starts a thread of its own: a side call or a sub-agent (another
system prompt), or a history the agent really changed (compaction, an edited turn). The
latter is told apart by its setting (the same system prompt and tools as a thread of the
trial), and counted as ``history_edited``.
"""

from __future__ import annotations

import hashlib
import json
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rlstack.common.contracts.trajectory import SpliceInfo, ThreadHead, TrajectoryRecord

MAX_HEADS_PER_TRIAL = 16
"""Threads followed per trial (main thread, side calls, sub-agents); the least recent goes first."""
MAX_TRIALS = 20_000
BOUNDARY_TOKENS = 1
"""Where a rendering holds no end-of-turn id to cut at (a template whose user turns end on none, a
thread's first call before any turn-end is known): it is matched less this many last ids. The
generation prompt's last id (the whitespace after the role) can merge with the reply's first
characters once the reply is rendered as history: a reply that starts with a newline turns the
prompt's ``\n`` + the reply's ``\n\n`` into one ``\n\n\n`` id (seen in CI: a random policy's reply)."""
TRIAL_IDLE_SECONDS = 3600.0

SegmentReason = Literal["history_edited", "no_turn_end"]


def fingerprint(ids: array, length: int) -> bytes:
    return hashlib.blake2b(memoryview(ids)[:length].tobytes(), digest_size=16).digest()


def stable_cut(ids: Sequence[int], turn_end: int | None) -> int:
    """Where a rendering's history ends and its generation prompt begins: just past its last
    end-of-turn id; without one, ``BOUNDARY_TOKENS`` from its end."""
    if turn_end is not None:
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] == turn_end:
                return i + 1
    return _stable(len(ids))


def stable_and_full_fingerprints(ids: array, cut: int) -> tuple[bytes, bytes]:
    """``fingerprint`` of the rendering up to ``cut`` and of all of it, in one pass."""
    view = memoryview(ids)
    digest = hashlib.blake2b(view[:cut].tobytes(), digest_size=16)
    stable = digest.digest()
    digest.update(view[cut:].tobytes())
    return stable, digest.digest()


def ids_array(ids: Sequence[int]) -> array:
    return array("l", ids)


@dataclass
class Head:
    """A thread's latest call: its exact ids and what its request rendered to."""

    request_id: str
    rendered_len: int
    rendered_fp: bytes
    stable_fp: bytes
    """Fingerprint of the rendering up to ``stable_len``: what a continuation starts with."""
    stable_len: int
    """The rendering less its generation prompt (``stable_cut``)."""
    tokens: array
    """The exact prompt sent + the completion received."""
    prompt_len: int
    turn_end: int | None
    """The id that closed the reply (an end-of-turn token), None if it was cut (length)."""
    root_len: int
    root_fp: bytes
    """The thread's first rendering (less its generation prompt): a later call that starts with it
    but continues no head edited the history."""
    messages_len: int = 0
    """Messages in the head's request: the next request's reply to it sits at this index."""
    reply: str = ""
    """``reply_key`` of what the policy answered."""
    request_key: bytes = b""
    """``messages_key`` of the head's request: its last message (with the same number of messages, the
    same request again, a retry; the rendering's fingerprint confirms it before anything is spliced)."""
    setting: bytes = b""
    """``setting_key`` of the thread's requests: its system prompt and tools."""

    def logged(self) -> ThreadHead:
        """What the call's record carries so another process can rebuild this head (``from_record``)."""
        return ThreadHead(rendered_len=self.rendered_len, rendered_fp=self.rendered_fp.hex(), stable_fp=self.stable_fp.hex(),
                          stable_len=self.stable_len, turn_end=self.turn_end, root_len=self.root_len, root_fp=self.root_fp.hex(),
                          messages_len=self.messages_len, reply=self.reply, request_key=self.request_key.hex(),
                          setting=self.setting.hex(), tokens_fp=fingerprint(self.tokens, len(self.tokens)).hex())

    @classmethod
    def from_record(cls, record: TrajectoryRecord) -> Head | None:
        """The head a record's call left, or None when it left none or its ids are not the ones sent."""
        logged = record.thread
        if logged is None or record.status != "ok" or not record.choices:
            return None
        tokens = ids_array([*record.prompt_token_ids, *record.choices[0].completion_token_ids])
        try:
            if fingerprint(tokens, len(tokens)) != bytes.fromhex(logged.tokens_fp):
                return None
            return cls(request_id=record.request_id, rendered_len=logged.rendered_len,
                       rendered_fp=bytes.fromhex(logged.rendered_fp), stable_fp=bytes.fromhex(logged.stable_fp),
                       stable_len=_stable(logged.rendered_len) if logged.stable_len is None else logged.stable_len, tokens=tokens, prompt_len=len(record.prompt_token_ids), turn_end=logged.turn_end,
                       root_len=logged.root_len, root_fp=bytes.fromhex(logged.root_fp), messages_len=logged.messages_len,
                       reply=logged.reply, request_key=bytes.fromhex(logged.request_key), setting=bytes.fromhex(logged.setting))
        except ValueError:  # not hex: a record this process cannot have written
            return None


@dataclass
class Splice:
    onto: str
    prefix_tokens: int
    tail_tokens: int
    rerendered_exact: bool
    """The re-rendered history equalled the generated ids (no drift to repair)."""
    retry: bool = False


@dataclass
class Plan:
    """What to send for one call: ``prompt`` ids, and how they were made."""

    prompt: list[int]
    splice: Splice | None = None
    segment: SegmentReason | None = None
    parent: Head | None = None
    unclosed: Head | None = None
    """With ``no_turn_end``: the head the call continues, whose reply the template renders with no
    end-of-turn id after it (``splice_through`` places it from a rendering of the history through it)."""


@dataclass
class TrialThreads:
    heads: list[Head] = field(default_factory=list)
    seen: float = field(default_factory=time.monotonic)


class ThreadTable:
    """Per-trial thread heads, bounded in trials and heads; one per proxy process."""

    def __init__(self, max_trials: int = MAX_TRIALS, idle_seconds: float = TRIAL_IDLE_SECONDS) -> None:
        self.trials: OrderedDict[str, TrialThreads] = OrderedDict()
        self.ended: OrderedDict[str, None] = OrderedDict()
        """Trials an env declared over: their threads are never taken up again from a log."""
        self.max_trials, self.idle_seconds = max_trials, idle_seconds
        self.turn_ends: set[int] = set()
        """End-of-turn ids seen closing a reply (to close a cut reply's turn the way the template does)."""

    def has(self, trial: str) -> bool:
        return trial in self.trials and bool(self.trials[trial].heads)

    def may_continue(self, trial: str, messages: Sequence[dict[str, Any]]) -> bool:
        """Cheap check on the messages alone before anything is rendered: does the request answer
        one of the trial's heads with that head's own reply, or repeat its request?

        A request with a later reply than the head's continues a call this process did not serve
        (another pod or worker did: ``thread_log``), or a reply the agent wrote itself: not this head."""
        state = self.trials.get(trial)
        if state is None:
            return False
        key: bytes | None = None
        for head in state.heads:
            if _replied(head, messages) and not _answered_since(head, messages):
                return True
            if len(messages) == head.messages_len:
                key = key or messages_key(messages[-1:])
                if key == head.request_key:
                    return True
        return False

    def starts_like(self, trial: str, messages: Sequence[dict[str, Any]], tools: Any = None) -> bool:
        """The request has one of the trial's threads' system prompt and tools but continues none of
        them: the agent rewrote that conversation's history (a compaction's summary, an edited turn).
        A side call or a sub-agent comes with a system prompt of its own."""
        state = self.trials.get(trial)
        if state is None:
            return False
        setting = setting_key(messages, tools)
        return any(h.setting == setting for h in state.heads)

    def plan(self, trial: str, rendered: Sequence[int], messages: Sequence[dict[str, Any]] | None = None,
             turn_end: int | None = None) -> Plan:
        """The prompt to send for a request of ``trial`` whose history renders to ``rendered``.

        ``messages`` (the request's, OpenAI form) lets an edited reply be told from a re-rendered
        one; without them the rendering alone decides. ``turn_end`` is the template's end-of-turn id
        (closes a reply that was cut before the policy ended its turn)."""
        state = self.trials.get(trial)
        if state is None:
            return Plan(prompt=list(rendered))
        arr = ids_array(rendered)
        best: Head | None = None
        for head in state.heads:
            if head.rendered_len > len(arr) or (best is not None and head.rendered_len <= best.rendered_len):
                continue
            if head.rendered_len == len(arr):  # the same request again, id for id
                same = fingerprint(arr, len(arr)) == head.rendered_fp
            else:  # an answer to the head: its history up to the generation prompt, then its reply
                same = fingerprint(arr, head.stable_len) == head.stable_fp and (messages is None or _replied(head, messages))
            if same:
                best = head
        if best is None:
            edited = any(h.root_len <= len(arr) and fingerprint(arr, h.root_len) == h.root_fp for h in state.heads)
            return Plan(prompt=list(rendered), segment="history_edited" if edited else None)
        if best.rendered_len == len(arr):  # the same request again: a new sample of the head's own turn
            prompt = best.tokens[: best.prompt_len].tolist()
            return Plan(prompt=prompt, splice=Splice(best.request_id, len(prompt), 0, True, retry=True), parent=best)
        if best.turn_end is not None:
            turn_end = best.turn_end
        elif turn_end is None:
            turn_end = _only(self.turn_ends)
        if turn_end is None:
            return Plan(prompt=list(rendered), segment="no_turn_end", unclosed=best)
        try:  # the first end-of-turn after the history is the reply's own (a role header holds none)
            end = rendered.index(turn_end, best.stable_len)
        except ValueError:
            return Plan(prompt=list(rendered), segment="no_turn_end", unclosed=best)
        return self._splice(best, rendered, end + 1, [] if best.turn_end is not None else [turn_end])

    def splice_through(self, head: Head, rendered: Sequence[int], through: Sequence[int], turn_end: int | None = None) -> Plan:
        """A continuation of ``head`` whose reply the template renders with no end of turn after it
        (harmony closes a final answer with ``<|end|>``, not the ``<|return|>`` generated; DeepSeek
        V3's template leaves a tool call open where it is handed content None): ``through`` is the history rendered up to and with the
        reply, so the reply ends where it ends, when it is the start of ``rendered``. A renderer that
        adds a generation prompt even when asked not to (vLLM's harmony) is cut at its last ``turn_end``."""
        for length in (len(through), stable_cut(through, turn_end) if turn_end in through else None):
            if length is not None and head.stable_len < length <= len(rendered) and list(rendered[:length]) == list(through[:length]):
                return self._splice(head, rendered, length, [])
        return Plan(prompt=list(rendered), segment="no_turn_end")

    def _splice(self, best: Head, rendered: Sequence[int], reply_end: int, closing: list[int]) -> Plan:
        """The head's exact ids + ``closing`` (the end of turn a cut reply lacks) + what the template
        renders after the reply (``rendered[reply_end:]``)."""
        exact = best.tokens.tolist()
        tail = list(rendered[reply_end:])
        # the head's generation prompt as sent, and the reply: what the history now renders in their place
        generated = exact[best.prompt_len - (best.rendered_len - best.stable_len):]
        rerendered = list(rendered[best.stable_len:reply_end])
        splice = Splice(best.request_id, len(exact), len(closing) + len(tail),
                        rerendered_exact=rerendered == generated + closing)
        return Plan(prompt=exact + closing + tail, splice=splice, parent=best)

    def record(self, trial: str, request_id: str, rendered: Sequence[int], plan: Plan, completion: Sequence[int],
               finish_reason: str | None, eos_stop: bool, messages: Sequence[dict[str, Any]] = (),
               reply: dict[str, Any] | None = None, tools: Any = None) -> Head:
        """A call answered: it becomes the head of its thread (replacing the head it continued)."""
        turn_end = completion[-1] if completion and eos_stop and finish_reason in ("stop", "tool_calls") else None
        arr = ids_array(rendered)
        parent = plan.parent
        cut = stable_cut(arr, turn_end if turn_end is not None else _only(self.turn_ends))
        stable_fp, rendered_fp = stable_and_full_fingerprints(arr, cut)
        root_len, root_fp = (parent.root_len, parent.root_fp) if parent else (cut, stable_fp)
        head = Head(request_id=request_id, rendered_len=len(arr), rendered_fp=rendered_fp, stable_fp=stable_fp, stable_len=cut,
                    tokens=ids_array([*plan.prompt, *completion]), prompt_len=len(plan.prompt), turn_end=turn_end,
                    root_len=root_len, root_fp=root_fp, messages_len=len(messages), reply=reply_key(reply or {}),
                    request_key=messages_key(messages[-1:]), setting=setting_key(messages, tools))
        state = self._touch(trial)
        self._push(state, head, replaced_head(plan.splice))
        self._expire()
        return head

    def adopt(self, trial: str, heads: Sequence[tuple[Head, str | None]]) -> int:
        """Heads other proxy processes made for ``trial`` (read back from their records), oldest first,
        each with the head it replaced there: taken up as if this process had recorded them.
        Returns how many were new; none for a trial that has ended."""
        if trial in self.ended or not heads:
            return 0
        state = self._touch(trial)
        known = {h.request_id for h in state.heads}
        adopted = 0
        for head, replaced in heads:
            if head.request_id not in known:
                self._push(state, head, replaced)
                known.add(head.request_id)
                adopted += 1
        self._expire()
        return adopted

    def _touch(self, trial: str) -> TrialThreads:
        state = self.trials.get(trial)
        if state is None:
            state = self.trials[trial] = TrialThreads()
        self.trials.move_to_end(trial)
        state.seen = time.monotonic()
        return state

    def _push(self, state: TrialThreads, head: Head, replaced: str | None) -> None:
        """``head`` becomes a head of the trial, in place of the head ``replaced`` names (the one it continued)."""
        if replaced is not None:
            state.heads = [h for h in state.heads if h.request_id != replaced]
        state.heads.append(head)
        del state.heads[:-MAX_HEADS_PER_TRIAL]
        if head.turn_end is not None:
            self.turn_ends.add(head.turn_end)

    def end(self, trial: str) -> None:
        self.trials.pop(trial, None)
        self.ended[trial] = None
        while len(self.ended) > self.max_trials:
            self.ended.popitem(last=False)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.idle_seconds
        while self.trials:
            trial, state = next(iter(self.trials.items()))
            if len(self.trials) <= self.max_trials and state.seen >= cutoff:
                return
            del self.trials[trial]


def replaced_head(splice: Splice | SpliceInfo | None) -> str | None:
    """The head a call replaced: the one it was spliced onto, unless it was a retry (a new sample of the
    same turn, beside the old one)."""
    return splice.onto if splice is not None and not splice.retry else None


def reply_key(message: dict[str, Any]) -> str:
    """A digest of an assistant message as what it says: its text (parts joined, trimmed) and its tool
    calls (name, parsed arguments); ids, empty blocks and JSON spacing do not count."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        calls.append([function.get("name"), arguments])
    key = json.dumps([(content or "").strip(), calls], sort_keys=True, default=str)
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def messages_key(messages: Sequence[dict[str, Any]]) -> bytes:
    return hashlib.blake2b(json.dumps(list(messages), sort_keys=True, default=str).encode(), digest_size=16).digest()


def setting_key(messages: Sequence[dict[str, Any]], tools: Any) -> bytes:
    """A conversation's setting: its leading system messages and its tools."""
    system = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            break
        system.append(message)
    return hashlib.blake2b(json.dumps([system, tools], sort_keys=True, default=str).encode(), digest_size=16).digest()


def _replied(head: Head, messages: Sequence[dict[str, Any]]) -> bool:
    if len(messages) <= head.messages_len:
        return False
    message = messages[head.messages_len]
    return isinstance(message, dict) and message.get("role") == "assistant" and reply_key(message) == head.reply


def _answered_since(head: Head, messages: Sequence[dict[str, Any]]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages[head.messages_len + 1:])


def _stable(length: int) -> int:
    return max(length - BOUNDARY_TOKENS, 0)


def _only(values: set[int]) -> int | None:
    return next(iter(values)) if len(values) == 1 else None
