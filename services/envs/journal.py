"""The env server's trial journal: finished work written down before it counts, so a killed env
server loses no finished trial and posts no group twice.

One append-only JSONL file per env server process (``<journal-dir>/<run>-<name>.<instance>.jsonl``,
held with an exclusive ``flock`` while the process lives), each line flushed and fsynced before
the step it records goes on:

- ``trial``: a trial was scored (its group, status, reward, trial directory);
- ``ready``: a group was built from its trials, with the body about to be posted and the
  ``Idempotency-Key`` it is posted under;
- ``posted``: the batcher acknowledged that group;
- ``dropped``: the live process gave the group up (a member could not be scored); its scored
  trials are abandoned at once with that reason, and so is any that finishes after.

On start, an env server takes over every journal of its run and name whose lock is free (its
writer is dead: a killed process, or a pod replaced under another name), and ``pending()`` gives
what it left: groups ``ready`` but not ``posted``
(posted again under the same key, so one the batcher did take is not taken twice) and trials of
groups never ``ready`` (abandoned: a group needs all its members, and a member's sandbox is gone
with the process that ran it). Each abandoned trial is appended to ``abandoned.jsonl`` with its
reason; once its groups are posted, a taken-over journal is deleted. A live journal is rewritten
without what is settled whenever it passes ``max_bytes``, so it holds at most the groups in flight.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from rlstack.episodes.trials.records import TrialResult, TrialStatus

log = logging.getLogger(__name__)


class TrialEntry(BaseModel):
    kind: Literal["trial"] = "trial"
    group: str
    trial: str
    task: str
    status: str
    reward: float | None
    trial_dir: str


class ReadyEntry(BaseModel):
    kind: Literal["ready"] = "ready"
    group: str
    key: str
    """The ``Idempotency-Key`` every post of this group carries, before and after a restart."""
    body: dict[str, Any] | list[dict[str, Any]]
    """The group as posted; with several policies, each policy's group, posted in one request."""


class PostedEntry(BaseModel):
    kind: Literal["posted"] = "posted"
    group: str


class DroppedEntry(BaseModel):
    kind: Literal["dropped"] = "dropped"
    group: str
    reason: str


class Abandoned(BaseModel):
    trial: str
    group: str
    task: str
    reward: float | None
    reason: str
    at: float = Field(default_factory=time.time)


class Pending(BaseModel):
    """What a restarted env server must settle before it starts new groups."""

    to_post: list[ReadyEntry]
    abandoned: list[Abandoned]


TRIAL_OF_GROUP = re.compile(r"^(?P<group>.+-(?P<instance>[0-9a-f]+)-g\d+)-(?P<member>t\d+)(-a(?P<attempt>\d+))?$")
"""A training trial's id: its group's name (``<worker>-<instance>-g<n>``), ``-t<member>``, ``-a<attempt>`` for a retry."""


def finished_on_disk(trials_dir: Path, run: str, instance: str = "*") -> list[TrialEntry]:
    """Training trials whose ``result.json`` says ok with a reward, the last attempt of each member
    (an earlier one was retried: not scorable); ``instance``: one env server process's only."""
    last: dict[str, tuple[int, TrialEntry]] = {}
    for path in trials_dir.glob(f"{run}/*-{instance}-g*/result.json"):
        match = TRIAL_OF_GROUP.match(path.parent.name)
        if not match:
            continue
        result = TrialResult.model_validate_json(path.read_text())
        attempt = int(match["attempt"] or 1)
        member = f"{match['group']}-{match['member']}"
        if member in last and last[member][0] > attempt:
            continue
        entry = TrialEntry(group=match["group"], trial=result.trial, task=result.task.name, status=result.status.value,
                           reward=result.reward, trial_dir=str(path.parent))
        last[member] = (attempt, entry)
    return [entry for _, entry in sorted(last.values(), key=lambda a: a[1].trial)
            if entry.status == TrialStatus.OK.value and entry.reward is not None]


class TrialJournal:
    def __init__(self, directory: Path, name: str, instance: str | None = None, max_bytes: int = 64 << 20) -> None:
        self.directory = directory
        """Made at the first write: a lone ``rlstack trial`` never writes one."""
        self.name = name
        self.instance = instance
        self.path = directory / (f"{name}.{instance}.jsonl" if instance else f"{name}.jsonl")
        self.abandoned_path = directory / f"{name}.abandoned.jsonl"
        self.max_bytes = max_bytes
        self._lock: int | None = None
        self._trials: dict[str, list[TrialEntry]] = {}
        """This process's scored trials by group, until the group is settled."""
        self._dropped: dict[str, str] = {}

    def hold(self) -> bool:
        """Take this journal's lock (kept until the process ends); False: a live process holds it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock = fd
        return True

    def orphans(self) -> list[TrialJournal]:
        """Journals of this run and name whose writers are gone, each now held by this process."""
        if not self.directory.is_dir():
            return []
        # By lock file too: a process killed before its first entry left a lock and no journal,
        # and its finished trials may still be on disk (``pending``'s ``on_disk``).
        instances = {path.name[len(self.name) + 1:-len(suffix)] for suffix in (".jsonl", ".lock")
                     for path in self.directory.glob(f"{self.name}.*{suffix}") if not path.name.endswith(".abandoned.jsonl")}
        found = []
        for instance in sorted(instances - {self.instance}):
            other = TrialJournal(self.directory, self.name, instance, self.max_bytes)
            if other.hold():
                found.append(other)
        return found

    def remove(self) -> None:
        """Delete a taken-over journal once settled (and its lock file; the lock itself goes with the fd)."""
        self.path.unlink(missing_ok=True)
        self.path.with_suffix(".lock").unlink(missing_ok=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    @staticmethod
    def new_key() -> str:
        return secrets.token_hex(16)

    def trial(self, entry: TrialEntry) -> None:
        if entry.group in self._dropped:  # finished after its group was given up
            self._abandon([entry], self._dropped[entry.group])
            return
        self._append(entry)
        self._trials.setdefault(entry.group, []).append(entry)

    def ready(self, group: str, key: str, body: dict[str, Any] | list[dict[str, Any]]) -> None:
        self._append(ReadyEntry(group=group, key=key, body=body))

    def posted(self, group: str) -> None:
        self._append(PostedEntry(group=group))
        self._trials.pop(group, None)
        if self.path.stat().st_size > self.max_bytes:
            self._compact()

    def dropped(self, group: str, reason: str) -> None:
        """The group will not be posted: its scored trials are listed as abandoned with ``reason``."""
        self._dropped[group] = reason
        self._abandon(self._trials.pop(group, []), reason)
        self._append(DroppedEntry(group=group, reason=reason))

    def pending(self, on_disk: Iterable[TrialEntry] = ()) -> Pending:
        """Read what a predecessor left; abandon its unfinished groups' trials (recorded with the reason).

        ``on_disk``: the predecessor's scored trials found in the trials directory. One killed after
        a trial's result was written and before its journal entry was is abandoned too, so no
        finished trial goes unaccounted for.
        """
        trials: dict[str, list[TrialEntry]] = {}
        ready: dict[str, ReadyEntry] = {}
        settled: set[str] = set()  # posted, or dropped (its trials were listed then)
        for entry in self.entries():
            if isinstance(entry, TrialEntry):
                trials.setdefault(entry.group, []).append(entry)
            elif isinstance(entry, ReadyEntry):
                ready[entry.group] = entry
            else:
                settled.add(entry.group)
        unfinished = [t for group, members in trials.items() if group not in ready and group not in settled for t in members]
        abandoned = self._abandon(unfinished, "the env server stopped before every trial of its group was scored")
        journaled = {t.trial for members in trials.values() for t in members}
        unjournaled = [t for t in on_disk if t.trial not in journaled and t.group not in ready]
        abandoned += self._abandon(unjournaled, "the env server stopped between the trial's result and its journal entry")
        to_post = [entry for group, entry in ready.items() if group not in settled]
        self._trials = {entry.group: trials.get(entry.group, []) for entry in to_post}  # for a refusal to list
        self._rewrite([*(t for members in self._trials.values() for t in members), *to_post])
        return Pending(to_post=to_post, abandoned=abandoned)

    def abandoned(self) -> list[Abandoned]:
        if not self.abandoned_path.exists():
            return []
        return [Abandoned.model_validate_json(line) for line in self.abandoned_path.read_text().splitlines() if line.strip()]

    def _abandon(self, trials: list[TrialEntry], reason: str) -> list[Abandoned]:
        abandoned = [Abandoned(trial=t.trial, group=t.group, task=t.task, reward=t.reward, reason=reason) for t in trials]
        if abandoned:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self.abandoned_path.open("a") as out:
                out.writelines(a.model_dump_json() + "\n" for a in abandoned)
                out.flush()
                os.fsync(out.fileno())
        return abandoned

    def _append(self, entry: BaseModel) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(entry.model_dump_json() + "\n")
            out.flush()
            os.fsync(out.fileno())

    def entries(self) -> list[TrialEntry | ReadyEntry | PostedEntry | DroppedEntry]:
        if not self.path.exists():
            return []
        kinds = {"trial": TrialEntry, "ready": ReadyEntry, "posted": PostedEntry, "dropped": DroppedEntry}
        entries = []
        for number, line in enumerate(self.path.read_text().splitlines(), 1):
            try:
                data = json.loads(line)
                entries.append(kinds[data["kind"]].model_validate(data))
            except (ValueError, KeyError, TypeError):
                log.warning("%s:%d: a torn or unknown line, skipped (a write cut by the kill)", self.path, number)
        return entries

    def _compact(self) -> None:
        """Keep what is not settled: groups not posted yet, with their trials."""
        entries = self.entries()
        done = {e.group for e in entries if isinstance(e, PostedEntry | DroppedEntry)}
        self._rewrite([e for e in entries if e.group not in done])

    def _rewrite(self, keep: list[BaseModel]) -> None:
        if not keep and not self.path.exists():
            return
        scratch = self.path.with_suffix(".jsonl.tmp")
        with scratch.open("w") as out:
            out.writelines(e.model_dump_json() + "\n" for e in keep)
            out.flush()
            os.fsync(out.fileno())
        os.replace(scratch, self.path)
