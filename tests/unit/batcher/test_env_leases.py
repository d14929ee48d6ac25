"""Env leases and the trainer's wait, on a clock the test turns (issue 38)."""

from __future__ import annotations

from rlstack.batcher.flow import StallWatch, TrainerWait
from rlstack.batcher.leases import EnvLeases
from rlstack.batcher.records import EnvRegistered, TrainerRegistered
from rlstack.batcher.state import BatcherState
from rlstack.common.contracts.atropos import EnvRegistration, TrainerRegistration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_env_silent_past_its_lease_stops_counting_and_comes_back_when_it_polls():
    clock = Clock()
    leases = EnvLeases(lease_seconds=30, clock=clock)
    leases.touch(0)
    leases.touch(1)
    clock.now += 20
    leases.touch(1)
    clock.now += 15  # env 0 silent 35 s, env 1 15 s
    assert leases.live_ids() == {1}
    assert leases.sweep() == [0] and leases.sweep() == []  # counted once
    assert leases.expired_total == 1
    assert leases.touch(0) is True  # a poll brings it back, and says so
    assert leases.live_ids() == {0, 1}


def test_time_the_batcher_stood_still_is_nobodys_silence():
    clock = Clock()
    leases = EnvLeases(lease_seconds=30, clock=clock)
    leases.touch(0)
    clock.now += 40
    leases.pause(40)
    assert leases.live_ids() == {0}


def test_weights_are_shared_among_live_envs_only():
    state = BatcherState()
    state.apply(TrainerRegistered(registration=TrainerRegistration(batch_size=32, max_token_len=2048)))
    for env_id in range(3):
        state.apply(EnvRegistered(env_id=env_id, real_name=f"agent_{env_id}",
                                  registration=EnvRegistration(max_token_length=2048, desired_name="agent", group_size=8)))
    assert [round(w, 3) for w in state.env_weights({0, 1, 2}).values()] == [0.333] * 3
    weights = state.env_weights({0, 2})
    assert set(weights) == {0, 2} and sum(weights.values()) == 1.0
    assert state.env_status(2, live={2})["env_weight"] == 1.0
    assert state.env_status(2)["env_weight"] == 1 / 3  # Atropos's rule: every connected env, dead or not


def test_the_trainer_waits_from_its_first_empty_poll_until_a_batch_and_only_while_it_polls():
    clock = Clock()
    wait = TrainerWait(poll_window=10, clock=clock)
    assert wait.seconds() is None
    wait.empty()
    clock.now += 5
    wait.empty()
    assert wait.seconds() == 5
    clock.now += 11  # stopped polling (killed, finished): not waiting
    assert wait.seconds() is None
    wait.empty()  # back: a new wait
    assert wait.seconds() == 0
    wait.served()
    assert wait.seconds() is None


def test_a_stall_is_one_episode_said_at_its_start_every_minute_and_at_its_end():
    clock = Clock()
    watch = StallWatch(repeat_seconds=60, clock=clock)
    assert watch.update(False) == (None, False)
    assert watch.update(True) == ("began", True)
    clock.now += 30
    assert watch.update(True) == (None, False)
    clock.now += 31
    assert watch.update(True) == (None, True)
    clock.now += 9
    assert watch.update(False) == ("ended", True)
    assert watch.last_duration == 70 and watch.episodes == 1
