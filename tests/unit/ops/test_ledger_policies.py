"""The ledger of a run of two policies, read from files the real writers leave: trial results naming
the policies each trial took part in, an env journal, the batcher's log written by a batcher of two
queues, and each policy's trainer's step records under ``policies/<p>/``. A trial group trained once
by each policy is trained once in both ledgers; twice by one policy's trainer is that policy's
"trained twice or more"; a policy's group its trainer lost is that policy's loss; a policy the env
made no group of is abandoned with that reason; and a group naming no policy is the first's."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import orjson

from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.service import BatcherService
from rlstack.batcher.wal import WriteAheadLog
from rlstack.common.contracts.atropos import GROUP_NAME_KEY, EnvRegistration, TrainerRegistration
from rlstack.envs.journal import TrialEntry, TrialJournal
from rlstack.ops.ledger import LEFT_OUT, Ledger, LedgerSources, PolicyLedgers, audit
from rlstack.trainer.report import StepRecord, append_line
from tests.helpers.groups import env_registration, make_group, trainer_registration
from tests.helpers.trial_results import write_result
from tests.unit.ops.test_ledger import STEP

RLSTACK = str(Path(sys.executable).with_name("rlstack"))
GROUPS = [f"env-0-abc-g{n}" for n in range(7)]


def part(seed: int, name: str, policy: str | None, members: int = 2) -> dict:
    """One policy's group of a trial group, as the agent env posts it (tagged, named, one row per member)."""
    group = {**make_group(size=members, seed=seed), "trials": list(range(members)), "group_overrides": {GROUP_NAME_KEY: name}}
    if policy is not None:
        group["policy"] = policy
    return group


def write_steps(path: Path, groups: list[str]) -> None:
    """A trainer's records, one group per step."""
    path.unlink(missing_ok=True)
    for step, name in enumerate(groups, 1):
        append_line(path, StepRecord(step=step, groups=[name], **STEP))


def two_policy_run(run: Path) -> None:
    """A run directory as ``rlstack up`` lays out a config of two policies (lead first, helper).

    g0: trained once by each policy's trainer. g1: the lead's trained twice (a replayed step), the
    helper's once. g2: the helper's served and lost with its killed trainer; the lead's trained.
    g3: the helper took part in one trial only: the env posted the lead's group alone, trained.
    g4: an Atropos-style group naming no policy (the first's queue), its trials naming none, trained
    by the lead. g5: both queued when the run stopped. g6: journaled ready, lead only, not yet posted.
    """
    trials, journals, wal = run / "trials", run / "env-journal", run / "batcher"
    for group in GROUPS:
        for member in range(2):
            took_part = {"lead": 2, "helper": 1}
            if group in (GROUPS[3], GROUPS[6]) and member == 1:
                took_part = {"lead": 1}
            write_result(trials, "r", f"{group}-t{member}", policies={} if group == GROUPS[4] else took_part)

    async def batcher() -> None:
        settings = BatcherSettings(data_dir=wal, policies=["lead", "helper"])
        svc = BatcherService(settings, WriteAheadLog(wal / "batcher.wal", "fsync"))
        svc.replay()
        for policy in ("lead", "helper"):
            registration = {**trainer_registration(batch_size=2, policy=policy), "replay_unsaved": False}
            await svc.register_trainer(TrainerRegistration.model_validate(registration))
        await svc.register_env(EnvRegistration.model_validate(env_registration(group_size=2)))
        for seed, group in enumerate(GROUPS[:6]):
            if group == GROUPS[3]:
                body = [part(seed, group, "lead")]
            elif group == GROUPS[4]:
                body = [part(seed, group, None)]
            else:
                body = [part(seed, group, "lead"), part(seed + 10, group, "helper")]
            await svc.post_groups(orjson.dumps(body), as_list=True, key=group)
        for _ in range(3):  # lead: g0, g1, g2; helper: g0, g1, g2
            await svc.next_batch(None, "lead")
            await svc.next_batch(None, "helper")
        for _ in range(2):  # the first's queue, named by none: g3, then g4
            await svc.next_batch(None)
        await svc.wal.close()

    asyncio.run(batcher())
    lead, helper = run / "policies" / "lead", run / "policies" / "helper"
    lead.mkdir(parents=True)
    helper.mkdir(parents=True)
    write_steps(lead / "metrics.jsonl", [GROUPS[0], GROUPS[1], GROUPS[1], GROUPS[2], GROUPS[3], GROUPS[4]])
    write_steps(helper / "metrics.jsonl", [GROUPS[0], GROUPS[1]])
    journal = TrialJournal(journals, "r-env", "abc")
    assert journal.hold()
    for member in range(2):
        journal.trial(TrialEntry(group=GROUPS[6], trial=f"{GROUPS[6]}-t{member}", task="x", status="ok", reward=1.0, trial_dir="/x"))
    journal.ready(GROUPS[6], "k6", [part(6, GROUPS[6], "lead")])


def test_each_policy_gets_the_fates_of_its_own_share(tmp_path):
    run = tmp_path / "run"
    two_policy_run(run)
    sources = LedgerSources.of(run)
    assert not sources.missing() and set(sources.policy_metrics) == {"lead", "helper"}
    ledgers = audit(**sources.model_dump())
    assert isinstance(ledgers, PolicyLedgers) and ledgers.unattributed_trials == []
    lead, helper = ledgers.policies["lead"], ledgers.policies["helper"]
    t = [[f"{g}-t0", f"{g}-t1"] for g in GROUPS]
    assert lead.trials == {"trained once": 8, "trained twice or more": 2, "abandoned with a reason": 0,
                           "dropped by the batcher": 0, "queued when the run stopped": 2,
                           "left to the env server's next start": 2, "lost": 0}  # g4 and its policy-less trials: the lead's
    assert lead.groups_acknowledged == 6 and lead.groups_acknowledged_lost == [] and lead.lost_trials == []
    # the helper took part in both trials of g0..g2 and g5, and in t0 only of g3 and g6
    assert helper.trials == {"trained once": 4, "trained twice or more": 0, "abandoned with a reason": 2,
                             "dropped by the batcher": 0, "queued when the run stopped": 2,
                             "left to the env server's next start": 0, "lost": 2}
    assert helper.lost_trials == t[2] and helper.groups_acknowledged_lost == [GROUPS[2]]
    assert helper.abandoned_reasons == {LEFT_OUT: 2}  # g3's and g6's t0
    assert not lead.ok and not helper.ok and not ledgers.ok
    assert json.loads(ledgers.model_dump_json())["ok"] is False


def test_a_group_trained_once_by_each_policy_is_not_trained_twice(tmp_path):
    """What the one-policy ledger read from the same files would call g0 (two trainers, one name)."""
    run = tmp_path / "run"
    two_policy_run(run)
    write_steps(run / "policies" / "lead" / "metrics.jsonl", GROUPS[:5])
    write_steps(run / "policies" / "helper" / "metrics.jsonl", GROUPS[:3])
    ledgers = audit(**LedgerSources.of(run).model_dump())
    assert isinstance(ledgers, PolicyLedgers) and ledgers.ok
    assert ledgers.policies["lead"].trials["trained once"] == 10 and ledgers.policies["lead"].trials["trained twice or more"] == 0
    assert ledgers.policies["helper"].trials["trained once"] == 6
    both = run / "both.jsonl"  # the two trainers' groups in one file: what a one-policy ledger would count
    write_steps(both, [*GROUPS[:5], *GROUPS[:3]])
    single = audit(run / "trials", run / "env-journal", run / "batcher" / "batcher.wal", both)
    assert isinstance(single, Ledger) and single.trials["trained twice or more"] == 6


def test_rlstack_ledger_prints_each_policys_ledger_and_fails_if_one_does(tmp_path):
    run = tmp_path / "run"
    two_policy_run(run)
    before = {str(p): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    result = subprocess.run([RLSTACK, "ledger", str(run)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    printed = json.loads(result.stdout)
    assert set(printed) == {"policies", "unattributed_trials", "ok"} and printed["ok"] is False
    assert printed["policies"]["helper"]["lost_trials"] == [f"{GROUPS[2]}-t0", f"{GROUPS[2]}-t1"]
    assert {str(p): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before  # read only
    (run / "policies" / "helper" / "metrics.jsonl").unlink()
    missing = subprocess.run([RLSTACK, "ledger", str(run)], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "lacks policies/helper/metrics.jsonl" in missing.stderr, missing.stderr
