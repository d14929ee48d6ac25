"""Multi-turn assembly: threads merge on exact ids, drift splits and is counted, masks and logprobs align."""

from __future__ import annotations

from rlstack.common.contracts.atropos import MASKED
from rlstack.common.contracts.trajectory import TrajectoryChoice, TrajectoryRecord
from rlstack.episodes.assemble import assemble


def call(prompt: list[int], completion: list[int], t: float, version: int | list[int] | None = 0, status: str = "ok") -> TrajectoryRecord:
    versions = [version] if isinstance(version, int) else version
    choices = [] if status != "ok" else [TrajectoryChoice(index=0, message={"role": "assistant"},
                                                          completion_token_ids=completion,
                                                          completion_logprobs=[-0.1 * (i + 1) for i in range(len(completion))],
                                                          weight_versions=versions)]
    return TrajectoryRecord(run_id="r", trial_id="t", request_id=f"q{t}", api="openai", started_at=t, ended_at=t + 1,
                            latency_seconds=1, weight_version=versions[0] if versions else None, prompt_token_ids=prompt, choices=choices,
                            status=status)


def test_three_turns_merge_into_one_sequence_training_only_the_policys_tokens():
    system, turn1, tool1, turn2, tool2, turn3 = [1, 2, 3], [10, 11, 2], [50, 51], [12, 13, 2], [52], [14, 2]
    records = [
        call(system, turn1, 0.0, version=3),
        call(system + turn1 + tool1, turn2, 1.0, version=4),
        call(system + turn1 + tool1 + turn2 + tool2, turn3, 2.0, version=4),
    ]
    out = assemble(records)
    assert len(out.sequences) == 1 and out.calls == 3 and out.merged_calls == 2 and out.thread_breaks == 0
    seq = out.sequences[0]
    assert seq.tokens == system + turn1 + tool1 + turn2 + tool2 + turn3
    expected_masks = [MASKED] * 3 + turn1 + [MASKED] * 2 + turn2 + [MASKED] + turn3
    assert seq.masks == expected_masks
    trained = [lp for lp, m in zip(seq.inference_logprobs, seq.masks) if m != MASKED]
    assert trained == [-0.1, -0.2, -0.30000000000000004, -0.1, -0.2, -0.30000000000000004, -0.1, -0.2]
    assert all(lp == 0.0 for lp, m in zip(seq.inference_logprobs, seq.masks) if m == MASKED)
    assert seq.trained_tokens == len(turn1 + turn2 + turn3) and seq.calls == 3
    assert out.oldest_weight_version == 3 and out.merge_share == 1.0
    assert seq.weight_versions == [3, 4] and seq.sampling_versions == [3, 4]  # the row spans a sync


def test_a_sequence_with_a_call_of_unknown_versions_claims_none():
    system, turn1, tool1, turn2 = [1, 2, 3], [10, 11, 2], [50, 51], [12, 13, 2]
    out = assemble([call(system, turn1, 0.0, version=[5]), call(system + turn1 + tool1, turn2, 1.0, version=None)])
    seq = out.sequences[0]
    assert seq.weight_versions == [5] and seq.unversioned_calls == 1 and seq.sampling_versions is None
    exact = assemble([call(system, turn1, 0.0, version=[5]), call(system + turn1 + tool1, turn2, 1.0, version=[5])]).sequences[0]
    assert exact.sampling_versions == [5]


def test_a_drifted_transcript_is_split_counted_and_its_copy_of_history_never_trained():
    system, turn1, tool1, turn2 = [1, 2, 3], [10, 11, 2], [50, 51], [12, 13, 2]
    retokenised = [10, 99, 2]  # the template re-rendered turn 1 as different ids
    records = [call(system, turn1, 0.0), call(system + retokenised + tool1, turn2, 1.0)]
    out = assemble(records)
    assert out.thread_breaks == 1 and out.merged_calls == 0 and len(out.sequences) == 2
    second = out.sequences[1]
    assert second.tokens == system + retokenised + tool1 + turn2
    assert [t for t, m in zip(second.tokens, second.masks) if m != MASKED] == turn2  # 99 is context only
    assert out.merge_share == 0.0


def test_side_calls_are_threads_of_their_own_not_breaks():
    main, side = [1, 2, 3], [7, 8]
    records = [call(main, [10, 2], 0.0), call(side, [20, 2], 0.5), call(main + [10, 2, 50], [11, 2], 1.0)]
    out = assemble(records)
    assert len(out.sequences) == 2 and out.thread_breaks == 0 and out.merged_calls == 1
    assert out.sequences[0].tokens == main + [10, 2, 50, 11, 2]


def test_failed_calls_are_counted_and_records_are_ordered_by_start():
    records = [call([1, 2] + [10, 2] + [5], [11, 2], 2.0), call([1, 2], [], 1.0, status="error"), call([1, 2], [10, 2], 0.0)]
    out = assemble(records)
    assert out.failed_calls == 1 and out.merged_calls == 1 and len(out.sequences) == 1


def test_a_call_without_completion_tokens_yields_no_empty_sequence():
    out = assemble([call([1, 2, 3], [], 0.0)])
    assert out.sequences == [] and out.calls == 1


def test_asking_the_same_prompt_again_is_a_retry_not_a_break():
    system = [1, 2, 3]
    out = assemble([call(system, [10, 2], 0.0), call(system, [11, 2], 1.0), call(system, [12, 2], 2.0)])
    assert out.retried_calls == 2 and out.thread_breaks == 0 and len(out.sequences) == 3


def test_segments_are_told_apart_by_kind():
    """A main thread that hands a prompt to claude-code's Agent tool, the sub-agent's thread (its
    request carries that prompt), a side call, and the main thread going on after the result."""
    import json

    def with_(record: TrajectoryRecord, message: dict | None = None, user: str | None = None) -> TrajectoryRecord:
        if message is not None:
            record.choices[0].message = message
        if user is not None:
            record.request = {"messages": [{"role": "system", "content": "x"},
                                           {"role": "user", "content": [{"type": "text", "text": user}]}]}
        return record

    agent_call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "Agent", "arguments": json.dumps({"description": "d", "prompt": "Sub-task: sum the numbers"})}}]}
    main, sub, side = [1, 2, 3], [7, 8, 9], [30, 31]
    records = [
        with_(call(main, [10, 2], 0.0), agent_call, user="Sum the numbers."),
        with_(call(sub, [20, 2], 1.0), user="<system-reminder>env</system-reminder>\nSub-task: sum the numbers"),
        call(sub + [20, 2, 60], [21, 2], 2.0),
        with_(call(side, [40, 2], 3.0), user="Write a title for: Sum the numbers."),
        call(main + [10, 2, 61], [11, 2], 4.0),
    ]
    out = assemble(records)
    assert [s.kind for s in out.sequences] == ["main", "sub_agent", "side_call"]
    assert out.segments == {"main": 1, "sub_agent": 1, "side_call": 1} and out.thread_breaks == 0
    assert out.stats().segments == out.segments and out.merged_calls == 2


def test_threads_never_cross_policies():
    """A helper call whose ids happen to extend the lead's thread (same system prompt, same
    template) starts the helper's own sequence: training the lead on it would train one policy on
    another's samples. The lead's next call still continues the lead's thread."""
    system, lead1, tool, helper1, lead2 = [1, 2, 3], [10, 11, 2], [50], [20, 21, 2], [12, 2]
    records = [call(system, lead1, 0.0), call(system + lead1 + tool, helper1, 1.0),
               call(system + lead1 + tool, lead2, 2.0)]
    records[0].policy, records[1].policy, records[2].policy = "lead", "helper", "lead"
    out = assemble(records)
    by_policy = out.by_policy()
    assert [s.tokens for s in by_policy["lead"]] == [system + lead1 + tool + lead2]
    assert [s.tokens for s in by_policy["helper"]] == [system + lead1 + tool + helper1]
    assert by_policy["helper"][0].masks == [MASKED] * 7 + helper1  # the lead's tokens are the helper's context only
    assert out.merged_calls == 1 and out.thread_breaks == 0 and out.retried_calls == 0
    assert out.stats().policies == {"lead": 1, "helper": 1}
    assert assemble(records[:1] + records[2:]).stats().policies == {"lead": 1}
