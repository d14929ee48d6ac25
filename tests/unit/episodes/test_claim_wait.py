"""A warm pod's driver waits for its claim: an empty or half-written claim file is no claim, a
line is, and an unclaimed pod gives up after its idle time."""

from __future__ import annotations

import threading
import time

from rlstack.episodes.inside.trial import CLAIM, wait_for_claim


def test_the_claim_is_the_whole_line_written_into_the_file(tmp_path):
    claim = tmp_path / CLAIM
    claim.write_bytes(b"")

    def claim_later() -> None:
        time.sleep(0.2)
        with open(claim, "r+b") as f:
            f.write(b"tri")  # half a claim: no newline yet
            f.flush()
            time.sleep(0.2)
            f.write(b"al-7\n")

    writer = threading.Thread(target=claim_later)
    writer.start()
    assert wait_for_claim(tmp_path, idle_seconds=30) == "trial-7"
    writer.join()


def test_an_unclaimed_pod_gives_up_after_its_idle_time(tmp_path):
    (tmp_path / CLAIM).write_bytes(b"")
    assert wait_for_claim(tmp_path, idle_seconds=0.3) is None
    assert wait_for_claim(tmp_path / "no-stage-yet", idle_seconds=0.2) is None  # no file: still no claim
