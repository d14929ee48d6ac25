"""A record whose text holds a character Python's ``str.splitlines`` breaks at (NEL, LINE
SEPARATOR, PARAGRAPH SEPARATOR: JSON strings carry them unescaped) is read back whole. The proxy
fuzz found such records skipped as torn lines: an agent could drop its own calls from training."""

import pytest

from rlstack.common.contracts.trajectory import TrajectoryChoice, TrajectoryRecord, read_trajectory
from rlstack.proxy.records.writer import TrajectoryWriter


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\r"])
def test_records_with_unicode_line_breaks_are_read_whole(tmp_path, char):
    writer = TrajectoryWriter(tmp_path, "w1")
    writer.start()
    for n in range(3):
        text = f"before{char}after {n}"
        writer.submit(TrajectoryRecord(
            run_id="r", trial_id="t", request_id=f"call-{n}", api="openai", started_at=float(n), ended_at=n + 0.5,
            latency_seconds=0.5, request={"messages": [{"role": "user", "content": text}]},
            choices=[TrajectoryChoice(index=0, message={"role": "assistant", "content": text}, completion_token_ids=[1, 2])]))
    writer.close()
    records = read_trajectory(tmp_path / "r" / "t")
    assert [r.request_id for r in records] == ["call-0", "call-1", "call-2"]
    assert records[1].choices[0].message["content"] == f"before{char}after 1"
