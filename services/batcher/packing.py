"""Choosing which queued groups form the next batch: whole groups summing exactly to batch_size.

Oldest first: groups are scanned in arrival order and the first combination that reaches the
target wins, so the newest group in a batch is as old as it can be. With one group size this
is plain FIFO; mixed sizes (several envs) still pack exactly where a greedy scan would stall.
A trainer that registered ``batch_fill: at_least`` takes the oldest groups once they reach
``batch_size`` instead: agent groups whose trials bring several sequences vary in size, and an
exact sum may never come.
"""

from __future__ import annotations

from collections.abc import Iterable


def select_batch(groups: Iterable[tuple[int, int]], batch_size: int, scan_limit: int = 4096) -> list[int] | None:
    """Ids of the groups (``(id, size)`` in arrival order) forming one batch, or None."""
    # reach[s] = ids of the earliest-found combination summing to s (a parent-pointer chain).
    reach: dict[int, tuple[int, int] | None] = {0: None}
    for scanned, (group_id, size) in enumerate(groups):
        if scanned >= scan_limit:
            break
        if size > batch_size:
            continue
        new_sums = []
        for total in reach:
            candidate = total + size
            if candidate <= batch_size and candidate not in reach:
                new_sums.append((candidate, total))
        for candidate, previous in new_sums:
            reach[candidate] = (group_id, previous)
            if candidate == batch_size:
                return _unwind(reach, batch_size)
    return None


def select_at_least(groups: Iterable[tuple[int, int]], batch_size: int) -> list[int] | None:
    """The oldest whole groups once their sequences reach ``batch_size`` (a trainer's ``at_least``)."""
    ids, total = [], 0
    for group_id, size in groups:
        ids.append(group_id)
        total += size
        if total >= batch_size:
            return ids
    return None


def _unwind(reach: dict[int, tuple[int, int] | None], total: int) -> list[int]:
    ids = []
    link = reach[total]
    while link is not None:
        group_id, previous = link
        ids.append(group_id)
        link = reach[previous]
    ids.reverse()
    return ids
