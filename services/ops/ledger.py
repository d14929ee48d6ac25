"""Where every finished trial of an agent run went: trained once, abandoned with a reason, still on
its way when the run stopped, or lost.

It reads what the services leave on disk, each the authority for its hop: the trial directories
(``result.json``: the trials that finished), the env servers' journals (groups built and not yet
acknowledged, and ``*.abandoned.jsonl`` with reasons), the batcher's write-ahead log (groups
acknowledged, dropped, still queued) and the trainer's ``metrics.jsonl`` (the groups of every step
its final weights hold: steps lost with a killed trainer are cut from it on resume). Groups are
matched by the name the env gives each (``group_overrides.rlstack_group``), trials to groups by
their ids (``<group>-t<i>``). ``bench/faults.py`` prints this after each fault run.

A run of several policies (``policies/<p>/metrics.jsonl``, one trainer each) gets one ledger per
policy: a trial's share of each policy it took part in (``result.json``'s ``trajectory.policies``)
has its own fate, read from that policy's groups in the batcher's log and its own trainer's
metrics, so a trial group trained once by each policy is trained once in each ledger, and twice by
one policy's trainer is that policy's "trained twice or more". A policy the env made no group of
for a trial group (it took part in fewer than two trials, or its rows all scored alike) leaves that
share abandoned with that reason. A group naming no policy is the first's (the batcher's rule);
the log names the first only through the batches it served it, so a trial or group of no policy in
a run whose first policy never took a batch belongs to no ledger and is listed as unattributed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, computed_field

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
from rlstack.episodes.trials.records import TrialResult
from rlstack.trainer.report import StepRecord, read_lines

Fate = Literal["trained once", "trained twice or more", "abandoned with a reason", "dropped by the batcher",
               "queued when the run stopped", "left to the env server's next start", "lost"]
FATES: tuple[Fate, ...] = get_args(Fate)
LEFT_OUT = ("the env server made no group of this policy's share (it took part in fewer than two of the group's "
            "trials, or its rows all scored alike)")
"""Why a policy's share of a trial group was abandoned when another policy's group of it was posted."""


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
    """Every group the log names, by id, then what its events did to them, whatever their policy. A
    compacted log has forgotten groups served before it: the trainer's records name those. Read only:
    an audit never writes to the run."""
    logs, _ = read_policy_logs(path)
    merged = BatcherLog()
    for log in logs.values():
        merged.acknowledged |= log.acknowledged
        merged.served |= log.served
        merged.dropped |= log.dropped
    return merged


def read_policy_logs(path: Path) -> tuple[dict[str | None, BatcherLog], str | None]:
    """The log by the policy each group names (None: none, the batcher's first), and the first's name
    where the log tells it: the policy named by the groups of batches served to the first (records
    name the first as null)."""
    names: dict[int, tuple[str, str | None]] = {}
    served_ids: set[int] = set()
    first_ids: set[int] = set()
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
                    names[first_id + offset] = (name, group.get("policy"))
        elif kind == RecordKind.EVENT:
            event = event_adapter.validate_json(payload)
            if isinstance(event, BatchServed):
                served_ids.update(event.group_ids)
                if event.policy is None:
                    first_ids.update(event.group_ids)
            elif isinstance(event, GroupsDropped):
                dropped_ids.update(dict.fromkeys(event.group_ids, event.reason))
    logs: dict[str | None, BatcherLog] = {}
    for group_id, (name, policy) in names.items():
        log = logs.setdefault(policy, BatcherLog())
        log.acknowledged.add(name)
        if group_id in served_ids:
            log.served.add(name)
        if group_id in dropped_ids:
            log.dropped[name] = dropped_ids[group_id]
    named_first = {names[i][1] for i in first_ids if i in names} - {None}
    return logs, named_first.pop() if len(named_first) == 1 else None


class Journals(BaseModel):
    abandoned: list[Abandoned] = []
    unsettled: set[str] = set()
    """Journaled trials of groups not yet acknowledged nor dropped."""
    ready: dict[str, set[str | None]] = {}
    """Groups built and not yet acknowledged, with the policies their body holds a group of (None: untagged)."""
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
        for e in entries:
            if isinstance(e, ReadyEntry) and e.group not in settled:
                found.ready[e.group] = {part.get("policy") for part in (e.body if isinstance(e.body, list) else [e.body])}
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
    policy_metrics: dict[str, Path] = {}
    """A run of several policies: each one's trainer's ``metrics.jsonl`` (``policies/<p>/`` beside where
    a single trainer's would be); empty: one policy, ``trainer_metrics``."""

    @classmethod
    def of(cls, directory: Path, run: str | None = None) -> LedgerSources:
        """A run directory of ``rlstack up`` (``run`` None), or the chart's shared volume, where each
        service keeps a run's files under its own folder (batcher/<run>/, runs/<run>/, trials/<run>/).
        Either holds ``policies/<p>/`` in place of the trainer's files when the run trains several policies."""
        if run is None:
            sources = cls(trials_dir=directory / "trials", journal_dir=directory / "env-journal",
                          batcher_wal=directory / "batcher" / "batcher.wal", trainer_metrics=directory / "metrics.jsonl")
        else:
            sources = cls(trials_dir=directory / "trials", journal_dir=directory / "env-journal", run=run,
                          batcher_wal=directory / "batcher" / run / "batcher.wal",
                          trainer_metrics=directory / "runs" / run / "metrics.jsonl")
        policies = sources.trainer_metrics.parent / "policies"
        if policies.is_dir():
            sources.policy_metrics = {d.name: d / "metrics.jsonl" for d in sorted(policies.iterdir()) if d.is_dir()}
        return sources

    def missing(self) -> list[Path]:
        """What a finished agent run leaves and this one lacks: an audit without it would report a
        run that never happened as one that lost nothing."""
        wanted = [(self.trials_dir, Path.is_dir), (self.journal_dir, Path.is_dir), (self.batcher_wal, Path.is_file),
                  *((path, Path.is_file) for path in (self.policy_metrics.values() or [self.trainer_metrics]))]
        return [path for path, present in wanted if not present(path)]


def audit(trials_dir: Path, journal_dir: Path, batcher_wal: Path, trainer_metrics: Path, run: str = "*",
          policy_metrics: dict[str, Path] | None = None) -> Ledger | PolicyLedgers:
    """``run``: the run id whose trials count (the proxy's trials directory may hold others');
    ``policy_metrics``: a run of several policies, each one's ledger (``audit_policies``)."""
    if policy_metrics:
        return audit_policies(trials_dir, journal_dir, batcher_wal, policy_metrics, run)
    trials = {entry.trial: entry.group for entry in finished_on_disk(trials_dir, run)}
    journals = read_journals(journal_dir)
    return _ledger(trials, journals, read_batcher_log(batcher_wal), read_lines(trainer_metrics, StepRecord),
                   dict(Counter(a.reason for a in journals.abandoned)))


class PolicyLedgers(BaseModel):
    """A run of several policies: each one's ledger, over the trials it took part in."""

    policies: dict[str, Ledger]
    unattributed_trials: list[str] = []
    """Finished trials no ledger holds: naming no policy, in a run whose log never named its first."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return all(ledger.ok for ledger in self.policies.values()) and not self.unattributed_trials


def audit_policies(trials_dir: Path, journal_dir: Path, batcher_wal: Path, policy_metrics: dict[str, Path],
                   run: str = "*") -> PolicyLedgers:
    """Each policy's ledger: the trials whose ``result.json`` names it, its groups in the batcher's
    log, its trainer's ``metrics.jsonl`` (``policy_metrics``)."""
    journals = read_journals(journal_dir)
    logs, first = read_policy_logs(batcher_wal)
    if first is not None and None in logs:  # groups naming no policy went to the first's queue
        untagged = logs.pop(None)
        log = logs.setdefault(first, BatcherLog())
        log.acknowledged |= untagged.acknowledged
        log.served |= untagged.served
        log.dropped |= untagged.dropped
    trials: dict[str | None, dict[str, str]] = {}
    for entry in finished_on_disk(trials_dir, run):
        result = TrialResult.model_validate_json((Path(entry.trial_dir) / "result.json").read_bytes())
        took_part = [p for p, n in (result.trajectory.policies if result.trajectory else {}).items() if n > 0]
        for policy in took_part or [first]:
            trials.setdefault(policy, {})[entry.trial] = entry.group
    posted: dict[str, set[str | None]] = {}  # group -> the policies the env posted (or will post) a group of
    for group, policies in journals.ready.items():
        posted[group] = {first if p is None else p for p in policies}
    for policy, log in logs.items():
        for group in log.acknowledged:
            posted.setdefault(group, set()).add(policy)
    ledgers = {}
    for policy in sorted({*policy_metrics, *(p for p in trials if p is not None), *(p for p in logs if p is not None)}):
        # a group posted without this policy's share, unless one naming no policy could be it
        left_out = {group for group, policies in posted.items() if policy not in policies and None not in policies}
        metrics = policy_metrics.get(policy)
        ledgers[policy] = _ledger(trials.get(policy, {}), journals, logs.get(policy, BatcherLog()),
                                  read_lines(metrics, StepRecord) if metrics is not None else [], None, left_out)
    return PolicyLedgers(policies=ledgers, unattributed_trials=sorted(trials.get(None, {})))


def _ledger(trials: dict[str, str], journals: Journals, batcher: BatcherLog, steps: list[StepRecord],
            abandoned_reasons: dict[str, int] | None, left_out: AbstractSet[str] = frozenset()) -> Ledger:
    """The fates of ``trials`` (trial -> group) from one queue's log and its trainer's steps;
    ``left_out``: groups the env posted without this queue's share; ``abandoned_reasons`` None:
    counted over ``trials`` (a policy's), else as given (the journals', whatever the trial)."""
    trained = Counter(name for step in steps for name in step.groups)
    abandoned_by_trial = {a.trial: a.reason for a in journals.abandoned}
    queued = batcher.acknowledged - batcher.served - set(batcher.dropped)

    def fate(trial: str, group: str) -> Fate:
        if trained[group] == 1:
            return "trained once"
        if trained[group] > 1:
            return "trained twice or more"
        if trial in abandoned_by_trial or group in left_out:
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
        abandoned_reasons=abandoned_reasons if abandoned_reasons is not None else dict(Counter(
            abandoned_by_trial.get(t, LEFT_OUT) for t, f in fates.items() if f == "abandoned with a reason")),
        groups_acknowledged=len(acknowledged),
        groups_acknowledged_lost=sorted(acknowledged - set(trained) - set(batcher.dropped) - queued),
        steps=len(step_counts),
        steps_recorded_twice=sorted(s for s, n in step_counts.items() if n > 1),
    )
