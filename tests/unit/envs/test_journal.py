"""The trial journal: what a killed env server leaves is posted once or abandoned with a reason."""

import os

from rlstack.envs.journal import TrialEntry, TrialJournal, finished_on_disk
from rlstack.episodes.trials.records import TrialStatus
from tests.helpers.trial_results import write_result


def trial(group: str, n: int, reward: float = 1.0) -> TrialEntry:
    return TrialEntry(group=group, trial=f"{group}-t{n}", task="sum", status="ok", reward=reward, trial_dir=f"/t/{group}-t{n}")


def test_a_restart_reposts_ready_groups_and_abandons_unfinished_ones(tmp_path):
    journal = TrialJournal(tmp_path, "run-env", "dead1")
    for n in range(2):
        journal.trial(trial("g0", n))
    journal.ready("g0", "key-0", {"tokens": [[1]], "scores": [1.0]})
    journal.posted("g0")  # landed: settled
    for n in range(2):
        journal.trial(trial("g1", n))
    journal.ready("g1", "key-1", {"tokens": [[2]], "scores": [0.0]})  # killed before the batcher answered
    journal.trial(trial("g2", 0, reward=0.5))  # killed while g2's other trial ran
    with journal.path.open("a") as f:
        f.write('{"kind": "trial", "group": "g3", "tri')  # a line the kill cut short

    live = TrialJournal(tmp_path, "run-env", "live1")
    assert live.hold()
    [after] = live.orphans()  # the dead writer's lock is free: this process takes its journal over
    assert after.path == journal.path and live.orphans() == []  # held now: nobody else takes it
    pending = after.pending()
    assert [(e.group, e.key, e.body) for e in pending.to_post] == [("g1", "key-1", {"tokens": [[2]], "scores": [0.0]})]
    assert [(a.trial, a.reward) for a in pending.abandoned] == [("g2-t0", 0.5)]
    assert "before every trial of its group was scored" in pending.abandoned[0].reason
    assert [a.trial for a in after.abandoned()] == ["g2-t0"]  # recorded for good, not only returned

    again = TrialJournal(tmp_path, "run-env", "dead1").pending()  # rewritten to what is unsettled
    assert [e.group for e in again.to_post] == ["g1"] and again.abandoned == []
    after.posted("g1")
    assert TrialJournal(tmp_path, "run-env", "dead1").pending().to_post == []
    refused = TrialJournal(tmp_path, "run-env", "dead1")
    refused.trial(trial("g9", 0))
    refused.ready("g9", "key-9", {"tokens": [[9]]})
    TrialJournal(tmp_path, "run-env", "dead1").pending()  # a restart that died too: the members stay journaled
    refused = TrialJournal(tmp_path, "run-env", "dead1")
    assert [e.group for e in refused.pending().to_post] == ["g9"]
    refused.dropped("g9", "refused by the batcher after a restart: 422")
    assert [(a.trial, a.reason[:10]) for a in refused.abandoned()] == [("g2-t0", "the env se"), ("g9-t0", "refused by")]
    after.remove()
    assert not journal.path.exists() and live.orphans() == []


def test_the_journal_stays_bounded_to_groups_in_flight(tmp_path):
    journal = TrialJournal(tmp_path, "run-env", "one", max_bytes=2000)
    for g in range(50):
        journal.trial(trial(f"g{g}", 0))
        journal.ready(f"g{g}", f"k{g}", {"tokens": [[g] * 20]})
        journal.posted(f"g{g}")
    journal.trial(trial("live", 0))
    assert journal.path.stat().st_size < 2000 + 1000
    assert TrialJournal(tmp_path, "run-env", "one").pending().abandoned[0].trial == "live-t0"


def test_a_journal_that_was_never_written_settles_nothing_and_writes_nothing(tmp_path):
    journal = TrialJournal(tmp_path / "env-journal", "run-env")
    pending = journal.pending()
    assert pending.to_post == [] and pending.abandoned == [] and not (tmp_path / "env-journal").exists()


def test_a_live_writers_journal_is_never_taken_over(tmp_path):
    import subprocess
    import sys

    journal = TrialJournal(tmp_path, "run-env", "alive")
    journal.trial(trial("g0", 0))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"), str(journal.path.with_suffix(".lock"))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        other = TrialJournal(tmp_path, "run-env", "newcomer")
        assert other.hold() and other.orphans() == []  # another process is writing that one
    finally:
        holder.kill()
        holder.wait()
    assert [j.path for j in other.orphans()] == [journal.path]  # its writer died: now it is an orphan


def test_a_dropped_group_lists_its_trials_at_once_and_settles_them(tmp_path):
    journal = TrialJournal(tmp_path, "run-env", "live")
    journal.trial(trial("g0", 0, reward=0.0))
    journal.dropped("g0", "group dropped: trial g0-t1 could not be scored after 2 attempt(s)")
    journal.trial(trial("g0", 2))  # a member that finished after its group was given up
    assert [(a.trial, a.reason[:12]) for a in journal.abandoned()] == [("g0-t0", "group droppe"), ("g0-t2", "group droppe")]
    pending = TrialJournal(tmp_path, "run-env", "live").pending()  # settled: not abandoned a second time
    assert pending.to_post == [] and pending.abandoned == [] and len(journal.abandoned()) == 2


def test_a_trial_finished_on_disk_but_never_journaled_is_abandoned_on_restart(tmp_path):
    """Killed after a trial's result.json and before its journal entry (or before any entry: a lock
    and no journal): the next start finds the trial on disk and lists it abandoned with the reason."""
    trials, journals = tmp_path / "trials", tmp_path / "journal"
    killed = TrialJournal(journals, "r-env", "dead01")
    assert killed.hold()
    os.close(killed._lock)  # the process is gone: only its lock file is left
    write_result(trials, "r", "env-0-dead01-g0-t0")
    write_result(trials, "r", "env-0-dead01-g0-t1", TrialStatus.AGENT_ERROR)  # never scored: not finished
    write_result(trials, "r", "env-0-beef02-g0-t0")  # another process's: not this orphan's

    live = TrialJournal(journals, "r-env", "cafe03")
    assert live.hold()
    [orphan] = live.orphans()
    pending = orphan.pending(finished_on_disk(trials, "r", orphan.instance))
    assert [(a.trial, a.reason) for a in pending.abandoned] == [
        ("env-0-dead01-g0-t0", "the env server stopped between the trial's result and its journal entry")]
    assert [a.trial for a in live.abandoned()] == ["env-0-dead01-g0-t0"]


def test_a_trial_groups_per_policy_groups_come_back_as_they_were_journaled(tmp_path):
    """Two policies: the groups of one trial group are one body, one key, reposted as one request."""
    journal = TrialJournal(tmp_path, "run-env", "dead2")
    for n in range(2):
        journal.trial(trial("g0", n))
    body = [{"tokens": [[1]], "scores": [1.0], "policy": "lead"}, {"tokens": [[2]], "scores": [0.0], "policy": "helper"}]
    journal.ready("g0", "key-0", body)
    live = TrialJournal(tmp_path, "run-env", "live2")
    assert live.hold()
    [after] = live.orphans()
    assert [(e.group, e.key, e.body) for e in after.pending().to_post] == [("g0", "key-0", body)]
