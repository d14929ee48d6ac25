"""Which policy's calls each trained row holds, read from a finished run: every row of a policy's groups
in the batcher's log must be one of that policy's own threads, id for id (a call record's prompt and
completion ids, as the proxy logged what its replica sampled), and none may begin with a call another
policy served. The ledger says each trial was trained once per policy; this says each policy trained
on its own tokens only (docs/policies.md). Read only."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

from rlstack.batcher.records import RecordKind, decode_groups, decode_keyed_groups
from rlstack.batcher.wal import read_records
from rlstack.common.contracts.trajectory import TrajectoryRecord, read_trajectory


class PolicyRows(BaseModel):
    rows: int = 0
    """Rows of this policy's groups in the batcher's log."""
    own_threads: int = 0
    """Rows that are exactly one of its own calls' prompt + completion ids (a whole thread, spliced)."""
    others_calls: int = 0
    """Rows that begin with a call another policy served (its prompt and the completion its replica
    sampled): trained on the other policy's tokens."""


class RowsReport(BaseModel):
    policies: dict[str, PolicyRows]
    calls: dict[str, int]
    """Answered calls in the trials, by the policy that served them."""
    ok: bool


def _records(trials: Path, run: str = "*") -> dict[str | None, list[TrajectoryRecord]]:
    by_policy: dict[str | None, list[TrajectoryRecord]] = defaultdict(list)
    for trial in sorted(p for p in trials.glob(f"{run}/*") if p.is_dir()):
        for record in read_trajectory(trial):
            if record.status == "ok" and record.choices:
                by_policy[record.policy].append(record)
    return by_policy


def _groups(wal: Path) -> list[dict]:
    groups: list[dict] = []
    for kind, payload in read_records(wal) if wal.is_file() else ():
        if kind == RecordKind.GROUPS:
            body = json.loads(decode_groups(payload)[1])
        elif kind == RecordKind.KEYED_GROUPS:
            body = json.loads(decode_keyed_groups(payload)[3])
        else:
            continue
        groups += body if isinstance(body, list) else [body]
    return groups


def audit_rows(run_dir: Path, first_policy: str | None = None, run: str | None = None) -> RowsReport:
    """``first_policy``: the name a group naming none is filed under (the batcher's first). ``run``: the
    chart's run id, ``run_dir`` then the shared volume's root (its batcher keeps ``batcher/<run>/``, the
    proxy ``trials/<run>/``), as ``rlstack ledger --run-id`` reads it."""
    records = _records(run_dir / "trials", run or "*")
    whole = {p: {tuple(r.prompt_token_ids + r.choices[0].completion_token_ids) for r in rs} for p, rs in records.items()}
    report: dict[str, PolicyRows] = defaultdict(PolicyRows)
    for group in _groups(run_dir / "batcher" / (run or "") / "batcher.wal"):
        policy = group.get("policy") or first_policy
        if policy is None:  # one policy: every call is its own
            own, others = set().union(*whole.values()), []
        else:  # a record naming none was written before policies: the first's
            own = whole.get(policy, set()) | (whole.get(None, set()) if policy == first_policy else set())
            others = [ids for p, calls in whole.items() if p != policy and not (p is None and policy == first_policy)
                      for ids in calls]
        counts = report[policy or "policy"]
        for tokens in group["tokens"]:
            row = tuple(tokens)
            counts.rows += 1
            counts.own_threads += row in own
            counts.others_calls += any(row[: len(ids)] == ids for ids in others)
    # a run whose log holds no rows proved nothing: not ok (a missing or empty log, the wrong directory)
    ok = bool(report) and all(c.others_calls == 0 and c.own_threads == c.rows for c in report.values())
    return RowsReport(policies=dict(report), calls={str(p): len(rs) for p, rs in records.items()}, ok=ok)
