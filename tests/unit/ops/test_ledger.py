"""The ledger of a run, read from files the real writers leave: trial results, an env journal (its
abandoned list too), the batcher's log written by the batcher service, the trainer's step records.
A trial whose batch a killed trainer took and lost is found lost; one trained in two steps is
found trained twice; every other fate is named."""

from __future__ import annotations

import asyncio

import orjson

from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.service import BatcherService
from rlstack.batcher.wal import WriteAheadLog
from rlstack.common.contracts.atropos import GROUP_NAME_KEY, EnvRegistration, TrainerRegistration
from rlstack.envs.journal import TrialEntry, TrialJournal
from rlstack.episodes.trials.records import (
    TrialStatus,
)
from rlstack.ops.ledger import audit
from rlstack.trainer.report import StepRecord, append_line
from tests.helpers.groups import env_registration, make_group, trainer_registration
from tests.helpers.trial_results import write_result

STEP = dict(weight_version=0, loss=0.0, reward_mean=0.0, reward_std=0.0, kl=0.0, clip_fraction=0.0, ratio_mean=1.0,
            grad_norm=0.0, tokens=1, step_seconds=1.0, tokens_per_second=1.0, wait_seconds=0.0, staleness_mean=0.0,
            staleness_max=0)


def named(seed: int, name: str) -> bytes:
    return orjson.dumps({**make_group(seed=seed), "group_overrides": {GROUP_NAME_KEY: name}})


def test_every_finished_trial_gets_its_fate(tmp_path):
    trials, journals, wal = tmp_path / "trials", tmp_path / "journal", tmp_path / "batcher"
    groups = [f"env-0-abc-g{n}" for n in range(7)]
    for group in groups:
        for member in range(2):
            write_result(trials, "r", f"{group}-t{member}")
    write_result(trials, "r", "env-0-abc-g0-t1-a2")  # a retry: the member counts once, by its last attempt
    write_result(trials, "r", "env-0-abc-g1-t2", TrialStatus.AGENT_ERROR)  # not scored: not a finished trial
    write_result(trials, "r", "env-eval-abc-e0-t0")  # an evaluation: not a training trial

    async def batcher() -> None:
        svc = BatcherService(BatcherSettings(data_dir=wal), WriteAheadLog(wal / "batcher.wal", "fsync"))
        svc.replay()
        await svc.register_trainer(TrainerRegistration.model_validate({**trainer_registration(batch_size=2), "replay_unsaved": False}))
        await svc.register_env(EnvRegistration.model_validate(env_registration(group_size=2)))
        for seed, group in enumerate(groups[:4]):  # g0..g3 acknowledged
            await svc.post_groups(named(seed, group), as_list=False, key=group)
        for _ in range(3):  # g0, g1, g2 served
            await svc.next_batch()
        await svc.wal.close()

    asyncio.run(batcher())
    # the trainer trained g0 in step 1, lost g1's step 2 when it was killed, trained g2 in steps 2 and 3
    metrics = tmp_path / "metrics.jsonl"
    for step, names in ((1, [groups[0]]), (2, [groups[2]]), (3, [groups[2]])):
        append_line(metrics, StepRecord(step=step, groups=names, **STEP))
    # g4: dropped by the env with a reason; g5: its env server killed before the group was built (the
    # next start abandons its trials); g6: built and journaled ready when the run stopped
    def finish(journal: TrialJournal, group: str) -> None:
        for member in range(2):
            journal.trial(TrialEntry(group=group, trial=f"{group}-t{member}", task="x", status="ok", reward=1.0, trial_dir="/x"))

    killed = TrialJournal(journals, "r-env", "dead")
    finish(killed, groups[5])
    live = TrialJournal(journals, "r-env", "abc")
    assert live.hold()
    for orphan in live.orphans():  # what a restarted env server does first
        orphan.pending()
        orphan.remove()
    finish(live, groups[4])
    live.dropped(groups[4], "refused by the batcher: 422")
    finish(live, groups[6])
    live.ready(groups[6], "k6", {})

    ledger = audit(trials, journals, wal / "batcher.wal", metrics)
    assert ledger.trials == {"trained once": 2, "trained twice or more": 2, "abandoned with a reason": 4,
                             "dropped by the batcher": 0, "queued when the run stopped": 2,
                             "left to the env server's next start": 2, "lost": 2}
    assert ledger.lost_trials == [f"{groups[1]}-t0", f"{groups[1]}-t1"]
    assert ledger.groups_acknowledged_lost == [groups[1]]
    assert ledger.abandoned_reasons == {"refused by the batcher: 422": 2,
                                        "the env server stopped before every trial of its group was scored": 2}
    assert not ledger.ok
    assert list(orjson.loads(ledger.model_dump_json())) == [  # what `rlstack ledger` prints for one policy, as before policies
        "trials", "lost_trials", "abandoned_reasons", "groups_acknowledged", "groups_acknowledged_lost", "steps",
        "steps_recorded_twice"]
