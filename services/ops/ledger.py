"""Where every finished trial of an agent run went: trained once, abandoned with a reason, still on
its way when the run stopped, or lost.

It reads what the services leave on disk, each the authority for its hop: the trial directories
(``result.json``: the trials that finished), the env servers' journals (groups built and not yet
acknowledged, and ``*.abandoned.jsonl`` with reasons), the batcher's write-ahead log (groups
acknowledged, dropped, still queued) and the trainer's ``metrics.jsonl`` (the groups of every step
its final weights hold: steps lost with a killed trainer are cut from it on resume). Groups are
matched by the name the env gives each (``group_overrides.rlstack_group``), trials to groups by
their ids (``<group>-t<i>``). ``bench/faults.py`` prints this after each fault run.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel

from rlstack.batcher.records import (
    BatchServed,
    GroupsDropped,
    RecordKind,
    decode_groups,
    decode_keyed_groups,
    event_adapter,
)
from rlstack.batcher.wal import read_records
from rlstack.common.contracts.atropos import group_name
from rlstack.envs.journal import (
    TRIAL_OF_GROUP,
    Abandoned,
    ReadyEntry,
    TrialEntry,
    TrialJournal,
    finished_on_disk,
)
from rlstack.trainer.report import StepRecord, read_lines

Fate = Literal["trained once", "trained twice or more", "abandoned with a reason", "dropped by the batcher",
               "queued when the run stopped", "left to the env server's next start", "lost"]
FATES: tuple[Fate, ...] = get_args(Fate)


class BatcherLog(BaseModel):
    """The batcher's log read back: group names by what became of them."""

    acknowledged: set[str] = set()
    served: set[str] = set()
    dropped: dict[str, str] = {}
    """Group name -> the batcher's reason (stale, unbatchable)."""


class Ledger(BaseModel):
    trials: dict[Fate, int]
    """Finished training trials (scored, last attempt) by fate."""
    lost_trials: list[str]
    abandoned_reasons: dict[str, int]
    groups_acknowledged: int
    groups_acknowledged_lost: list[str]
    """Acknowledged by the batcher, and neither trained, dropped with a reason, nor still queued."""
    steps: int
    steps_recorded_twice: list[int]

    @property
    def ok(self) -> bool:
        return (not self.lost_trials and not self.groups_acknowledged_lost and not self.steps_recorded_twice
                and self.trials["trained twice or more"] == 0)


def read_batcher_log(path: Path) -> BatcherLog:
    """Every group the log names, by id, then what its events did to them. A compacted log has
    forgotten groups served before it: the trainer's records name those. Read only: an audit never writes to the run."""
    names: dict[int, str] = {}
    served_ids: set[int] = set()
    dropped_ids: dict[int, str] = {}
    for kind, payload in read_records(path) if path.is_file() else ():
        if kind in (RecordKind.GROUPS, RecordKind.KEYED_GROUPS):
            if kind == RecordKind.GROUPS:
                first_id, raw = decode_groups(payload)
            else:
                first_id, _, _, raw = decode_keyed_groups(payload)
            groups = json.loads(raw)
            for offset, group in enumerate(groups if isinstance(groups, list) else [groups]):
                if (name := group_name(group)) is not None:
                    names[first_id + offset] = name
        elif kind == RecordKind.EVENT:
            event = event_adapter.validate_json(payload)
            if isinstance(event, BatchServed):
                served_ids.update(event.group_ids)
            elif isinstance(event, GroupsDropped):
                dropped_ids.update(dict.fromkeys(event.group_ids, event.reason))
    return BatcherLog(acknowledged=set(names.values()), served={names[i] for i in served_ids if i in names},
                      dropped={names[i]: why for i, why in dropped_ids.items() if i in names})


class Journals(BaseModel):
    abandoned: list[Abandoned] = []
    unsettled: set[str] = set()
    """Journaled trials of groups not yet acknowledged nor dropped."""
    instances: set[str] = set()
    """Env server processes whose journal (or its lock) is still there: not taken over by a restart."""


def read_journals(journal_dir: Path) -> Journals:
    found = Journals()
    if not journal_dir.is_dir():
        return found
    for path in sorted(journal_dir.glob("*.jsonl")):
        if path.name.endswith(".abandoned.jsonl"):
            found.abandoned += TrialJournal(journal_dir, path.name.removesuffix(".abandoned.jsonl")).abandoned()
            continue
        entries = TrialJournal(journal_dir, path.name.removesuffix(".jsonl")).entries()
        settled = {e.group for e in entries if not isinstance(e, TrialEntry | ReadyEntry)}
        found.unsettled |= {e.trial for e in entries if isinstance(e, TrialEntry) and e.group not in settled}
    found.instances = {path.name.rsplit(".", 2)[-2] for path in [*journal_dir.glob("*.*.jsonl"), *journal_dir.glob("*.*.lock")]
                       if not path.name.endswith(".abandoned.jsonl")}
    return found


class LedgerSources(BaseModel):
    """Where a run's trials, journals, batcher log and trainer metrics lie."""

    trials_dir: Path
    journal_dir: Path
    batcher_wal: Path
    trainer_metrics: Path
    run: str = "*"

    @classmethod
    def of(cls, directory: Path, run: str | None = None) -> LedgerSources:
        """A run directory of ``rlstack up`` (``run`` None), or the chart's shared volume, where each
        service keeps a run's files under its own folder (batcher/<run>/, runs/<run>/, trials/<run>/)."""
        if run is None:
            return cls(trials_dir=directory / "trials", journal_dir=directory / "env-journal",
                       batcher_wal=directory / "batcher" / "batcher.wal", trainer_metrics=directory / "metrics.jsonl")
        return cls(trials_dir=directory / "trials", journal_dir=directory / "env-journal", run=run,
                   batcher_wal=directory / "batcher" / run / "batcher.wal", trainer_metrics=directory / "runs" / run / "metrics.jsonl")

    def missing(self) -> list[Path]:
        """What a finished agent run leaves and this one lacks: an audit without it would report a
        run that never happened as one that lost nothing."""
        wanted = [(self.trials_dir, Path.is_dir), (self.journal_dir, Path.is_dir), (self.batcher_wal, Path.is_file),
                  (self.trainer_metrics, Path.is_file)]
        return [path for path, present in wanted if not present(path)]


def audit(trials_dir: Path, journal_dir: Path, batcher_wal: Path, trainer_metrics: Path, run: str = "*") -> Ledger:
    """``run``: the run id whose trials count (the proxy's trials directory may hold others')."""
    trials = {entry.trial: entry.group for entry in finished_on_disk(trials_dir, run)}
    journals = read_journals(journal_dir)
    batcher = read_batcher_log(batcher_wal)
    steps = read_lines(trainer_metrics, StepRecord)
    trained = Counter(name for step in steps for name in step.groups)
    abandoned_by_trial = {a.trial: a.reason for a in journals.abandoned}
    queued = batcher.acknowledged - batcher.served - set(batcher.dropped)

    def fate(trial: str, group: str) -> Fate:
        if trained[group] == 1:
            return "trained once"
        if trained[group] > 1:
            return "trained twice or more"
        if trial in abandoned_by_trial:
            return "abandoned with a reason"
        if group in batcher.dropped:
            return "dropped by the batcher"
        if group in queued:
            return "queued when the run stopped"
        if group in batcher.acknowledged:  # taken by the batcher, then neither trained, dropped nor queued
            return "lost"
        if trial in journals.unsettled or TRIAL_OF_GROUP.match(trial)["instance"] in journals.instances:
            return "left to the env server's next start"  # its recovery posts or abandons it
        return "lost"

    fates = {trial: fate(trial, group) for trial, group in trials.items()}
    counts = Counter(fates.values())
    acknowledged = batcher.acknowledged | set(trained)
    step_counts = Counter(step.step for step in steps)
    return Ledger(
        trials={f: counts.get(f, 0) for f in FATES},
        lost_trials=sorted(t for t, f in fates.items() if f == "lost"),
        abandoned_reasons=dict(Counter(a.reason for a in journals.abandoned)),
        groups_acknowledged=len(acknowledged),
        groups_acknowledged_lost=sorted(acknowledged - set(trained) - set(batcher.dropped) - queued),
        steps=len(step_counts),
        steps_recorded_twice=sorted(s for s, n in step_counts.items() if n > 1),
    )
