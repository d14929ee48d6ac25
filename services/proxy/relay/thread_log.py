"""Takes up a trial's threads from what other proxy processes logged of it.

A trial's thread heads live in the process that served its calls. When that process is gone
(a proxy pod killed or rolled, its sandbox's calls now routed to another pod) or is another
worker of the same pod, the next call would go un-spliced and its trial break into segments.
Every record of a call that became a head carries what the head holds beyond its ids
(``TrajectoryRecord.thread``), and all processes write into one trials directory, each into
its own file. So on a call that continues none of its heads, a process reads the trial's new
records from the other writers' files and takes up their heads, as if it had served them.

Read only on such a miss, and each file only from where the last read stopped.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from pathlib import Path

from pydantic import ValidationError

from rlstack.common.contracts.trajectory import TrajectoryRecord, trajectory_file, trajectory_files
from rlstack.common.names import ID_PATTERN
from rlstack.proxy.relay.threads import MAX_TRIALS, Head, replaced_head

log = logging.getLogger(__name__)
_ID = re.compile(ID_PATTERN)
NO_HEAD = b'"thread":null}'
"""How a record with no head ends (``thread`` is its last field; the request's own keys come before it)."""


class ThreadLog:
    def __init__(self, trials_dir: Path, own_writer: str, max_trials: int = MAX_TRIALS) -> None:
        self.trials_dir = trials_dir
        self.own_file = trajectory_file(Path(), own_writer).name
        self.offsets: OrderedDict[str, dict[str, int]] = OrderedDict()
        """Per trial, how far each other writer's file has been read (whole lines only)."""
        self.max_trials = max_trials

    def new_heads(self, trial: str) -> list[tuple[Head, str | None]]:
        """Heads in the trial's records that other writers appended since the last read, in the order
        their calls started, each with the head it replaced. Blocking file reads: run in a thread."""
        return [(head, replaced) for head, replaced, _ in self._new_heads(trial)]

    def new_heads_by_policy(self, trial: str, default: str) -> dict[str, list[tuple[Head, str | None]]]:
        """``new_heads`` filed by the policy that served each (``default`` for records from before
        policies): each policy's threads take up only its own, and none is lost to another's read."""
        by_policy: dict[str, list[tuple[Head, str | None]]] = {}
        for head, replaced, policy in self._new_heads(trial):
            by_policy.setdefault(policy or default, []).append((head, replaced))
        return by_policy

    def _new_heads(self, trial: str) -> list[tuple[Head, str | None, str | None]]:
        run, _, name = trial.partition("/")
        if not (_ID.match(run) and _ID.match(name)):
            return []
        trial_dir = self.trials_dir / run / name
        offsets = self.offsets.setdefault(trial, {})
        self.offsets.move_to_end(trial)
        while len(self.offsets) > self.max_trials:
            self.offsets.popitem(last=False)
        records: list[TrajectoryRecord] = []
        for path in trajectory_files(trial_dir):
            if path.name != self.own_file:
                records += self._read_new(path, offsets)
        records.sort(key=lambda r: (r.started_at, r.ended_at))
        heads = []
        for record in records:
            head = Head.from_record(record)
            if head is not None:
                heads.append((head, replaced_head(record.splice), record.policy))
        return heads

    def forget(self, trial: str) -> None:
        self.offsets.pop(trial, None)

    def _read_new(self, path: Path, offsets: dict[str, int]) -> list[TrajectoryRecord]:
        start = offsets.get(path.name, 0)
        try:
            with path.open("rb") as f:
                f.seek(start)
                data = f.read()
        except OSError as exc:
            log.warning("could not read %s: %s", path, exc)
            return []
        whole = data.rfind(b"\n") + 1  # a line still being appended is read next time
        offsets[path.name] = start + whole
        records = []
        for line in data[:whole].split(b"\n"):
            if not line.strip() or line.rstrip().endswith(NO_HEAD):  # a call that left no head: not worth parsing
                continue
            try:
                records.append(TrajectoryRecord.model_validate_json(line))
            except ValidationError:
                log.warning("%s: skipped a line that is not a trajectory record", path)
        return records
