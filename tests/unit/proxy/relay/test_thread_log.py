"""A trial's threads taken up from another proxy process's records: the process that served the
thread is gone (a dead pod) or is another worker, and the next call still goes on the exact ids."""

from __future__ import annotations

import time
from pathlib import Path

from rlstack.common.contracts.trajectory import (
    SpliceInfo,
    TrajectoryChoice,
    TrajectoryRecord,
    trajectory_file,
)
from rlstack.proxy.relay.thread_log import ThreadLog
from rlstack.proxy.relay.threads import Plan, ThreadTable

EOT, NL = 2, 203
SYSTEM = [1, 50, 51, EOT, NL, 1, 60, 61, EOT, NL, 1, 70, NL]
TRIAL = "run-1/trial-1"


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


class Served:
    """One proxy process serving a thread, logging each call as the hook does (into its own file)."""

    def __init__(self, trials_dir: Path, writer: str) -> None:
        self.table = ThreadTable()
        self.path = trajectory_file(trials_dir / "run-1" / "trial-1", writer)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def call(self, call_id: str, rendered: list[int], messages: list[dict], reply: list[int], text: str,
             table: ThreadTable | None = None, policy: str | None = None) -> Plan:
        table = table or self.table
        plan = table.plan(TRIAL, rendered, messages)
        head = table.record(TRIAL, call_id, rendered, plan, reply, "stop", eos_stop=True, messages=messages,
                            reply=assistant(text))
        splice = plan.splice
        record = TrajectoryRecord(
            run_id="run-1", trial_id="trial-1", request_id=call_id, api="openai", started_at=time.time(),
            ended_at=time.time(), latency_seconds=0.0, prompt_token_ids=plan.prompt,
            choices=[TrajectoryChoice(index=0, message=assistant(text), finish_reason="stop", completion_token_ids=reply)],
            splice=SpliceInfo(onto=splice.onto, prefix_tokens=splice.prefix_tokens, tail_tokens=splice.tail_tokens)
            if splice else None, thread=head.logged(), policy=policy)
        with self.path.open("a") as f:
            f.write(record.model_dump_json() + "\n")
        return plan


def conversation(turns: int) -> tuple[list[list[int]], list[list[dict]], list[list[int]]]:
    """Per turn: the rendering (the template re-renders every reply as other ids), the messages, the reply's ids."""
    renderings, histories, replies = [], [], []
    rendered, messages = list(SYSTEM), [{"role": "system", "content": "s"}, user("go")]
    for turn in range(turns):
        renderings.append(rendered)
        histories.append(list(messages))
        reply = [900 + turn, 901, EOT]
        replies.append(reply)
        rendered = rendered + [900 + turn, 9012, EOT] + [NL, 1, 80 + turn, EOT, NL, 1, 70, NL]
        messages = messages + [assistant(f"r{turn}"), user(f"u{turn}")]
    return renderings, histories, replies


def test_a_thread_served_by_a_dead_process_continues_on_its_exact_ids_in_another(tmp_path: Path) -> None:
    renderings, histories, replies = conversation(3)
    dead = Served(tmp_path, "pod-a-1")
    for turn in range(2):
        dead.call(f"c{turn}", renderings[turn], histories[turn], replies[turn], f"r{turn}")
    expected = dead.table.plan(TRIAL, renderings[2], histories[2])  # what the dead pod would have sent

    alive, log = ThreadTable(), ThreadLog(tmp_path, "pod-b-1")
    assert not alive.may_continue(TRIAL, histories[2])
    assert alive.adopt(TRIAL, log.new_heads(TRIAL)) == 2
    assert [h.request_id for h in alive.trials[TRIAL].heads] == ["c1"]  # c1 replaced c0 there, and here
    assert alive.may_continue(TRIAL, histories[2])
    plan = alive.plan(TRIAL, renderings[2], histories[2])
    assert plan.prompt == expected.prompt == SYSTEM + replies[0] + renderings[1][len(SYSTEM) + 3:] + replies[1] + \
        renderings[2][-8:]
    assert plan.splice is not None and plan.splice.onto == "c1"
    assert log.new_heads(TRIAL) == []  # each line is read once


def test_two_workers_alternating_keep_one_thread(tmp_path: Path) -> None:
    """A worker holding a head the other worker has since continued must not splice onto it (that
    would re-render the other worker's reply): it takes up the newer head first."""
    renderings, histories, replies = conversation(4)
    a, b = Served(tmp_path, "pod-1"), Served(tmp_path, "pod-2")
    log_a, log_b = ThreadLog(tmp_path, "pod-1"), ThreadLog(tmp_path, "pod-2")
    a.call("c0", renderings[0], histories[0], replies[0], "r0")
    for turn, (me, log) in enumerate([(b, log_b), (a, log_a), (b, log_b)], start=1):
        assert not me.table.may_continue(TRIAL, histories[turn])  # stale or no head here
        assert me.table.adopt(TRIAL, log.new_heads(TRIAL)) >= 1
        assert me.table.may_continue(TRIAL, histories[turn])
        plan = me.call(f"c{turn}", renderings[turn], histories[turn], replies[turn], f"r{turn}")
        assert plan.splice is not None and plan.splice.onto == f"c{turn - 1}"
    assert [h.request_id for h in b.table.trials[TRIAL].heads] == ["c3"]
    assert [h.request_id for h in a.table.trials[TRIAL].heads] == ["c2"]


def test_nothing_is_taken_up_for_an_ended_trial_or_from_ids_that_are_not_the_ones_sent(tmp_path: Path) -> None:
    renderings, histories, replies = conversation(2)
    served = Served(tmp_path, "pod-a-1")
    served.call("c0", renderings[0], histories[0], replies[0], "r0")

    ended = ThreadTable()
    ended.end(TRIAL)
    assert ended.adopt(TRIAL, ThreadLog(tmp_path, "pod-b-1").new_heads(TRIAL)) == 0

    lines = served.path.read_text().splitlines()
    record = TrajectoryRecord.model_validate_json(lines[0])
    record.choices[0].completion_token_ids[0] += 1  # the log says other ids than the head was made of
    served.path.write_text(record.model_dump_json() + "\n")
    assert ThreadLog(tmp_path, "pod-b-1").new_heads(TRIAL) == []


def test_a_line_still_being_written_is_read_when_whole_and_the_own_file_is_never_read(tmp_path: Path) -> None:
    renderings, histories, replies = conversation(2)
    other = Served(tmp_path, "pod-a-1")
    other.call("c0", renderings[0], histories[0], replies[0], "r0")
    line = other.path.read_bytes()
    other.path.write_bytes(line[:-40])  # torn: the writer is mid-append
    log = ThreadLog(tmp_path, "pod-b-1")
    assert log.new_heads(TRIAL) == []
    other.path.write_bytes(line)
    assert [h.request_id for h, _ in log.new_heads(TRIAL)] == ["c0"]

    mine = ThreadLog(tmp_path, "pod-a-1")  # the writer's own records are already in its table
    assert mine.new_heads(TRIAL) == []
    assert ThreadLog(tmp_path, "pod-b-1").new_heads("../../etc/passwd") == []


def test_a_request_that_carries_its_own_thread_null_key_still_leaves_its_head(tmp_path: Path) -> None:
    """Lines without a head are skipped unparsed by how they end; the agent's request text cannot fake that."""
    renderings, histories, replies = conversation(1)
    served = Served(tmp_path, "pod-a-1")
    served.call("c0", renderings[0], histories[0], replies[0], "r0")
    record = TrajectoryRecord.model_validate_json(served.path.read_text())
    record.request = {"thread": None, "messages": histories[0]}
    served.path.write_text(record.model_dump_json() + "\n")
    assert b'"thread":null' in served.path.read_bytes()
    assert [h.request_id for h, _ in ThreadLog(tmp_path, "pod-b-1").new_heads(TRIAL)] == ["c0"]


def test_each_policy_takes_up_only_the_heads_its_own_replicas_made(tmp_path: Path) -> None:
    """Two policies of one trial, both served by a process now gone: read once, each head goes to its
    own policy's threads (records from before policies to the first one), none to the other's."""
    renderings, histories, replies = conversation(2)
    dead = Served(tmp_path, "pod-a-1")
    dead.call("lead-0", renderings[0], histories[0], replies[0], "r0", policy="lead")
    dead.call("helper-0", renderings[0], histories[0], replies[0], "r0", table=ThreadTable(), policy="helper")
    dead.call("old-0", renderings[0], histories[0], replies[0], "r0", table=ThreadTable())
    by_policy = ThreadLog(tmp_path, "pod-b-1").new_heads_by_policy(TRIAL, "lead")
    assert {p: [h.request_id for h, _ in heads] for p, heads in by_policy.items()} == {
        "lead": ["lead-0", "old-0"], "helper": ["helper-0"]}
