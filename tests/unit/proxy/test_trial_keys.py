import pytest

from rlstack.common.trial_keys import TRIAL_PATH, InvalidTrialKey, mint, verify


def test_round_trip_names_run_and_trial():
    identity = verify("s", mint("s", "run-1", "trial.7", now=1000), now=1001)
    assert (identity.run, identity.trial) == ("run-1", "trial.7")


@pytest.mark.parametrize("mutate, reason", [
    (lambda k: k.replace("rlst_", "xxxx_"), "not a trial key"),
    (lambda k: k[:-2] + ("AA" if not k.endswith("AA") else "BB"), "bad signature"),
])
def test_tampered_keys_fail(mutate, reason):
    with pytest.raises(InvalidTrialKey, match=reason):
        verify("s", mutate(mint("s", "r", "t")))


def test_other_secret_and_expiry_fail():
    key = mint("s", "r", "t", ttl_seconds=10, now=1000)
    with pytest.raises(InvalidTrialKey, match="bad signature"):
        verify("other", key, now=1001)
    with pytest.raises(InvalidTrialKey, match="expired"):
        verify("s", key, now=1011)


def test_names_are_restricted():
    with pytest.raises(ValueError):
        mint("s", "../etc", "t")


def test_path_prefix_keeps_the_rest_of_the_path():
    m = TRIAL_PATH.match("/trials/run-1/t2/v1/messages")
    assert (m["run"], m["trial"], m["rest"]) == ("run-1", "t2", "/v1/messages")
    assert TRIAL_PATH.match("/trials/../x/v1/messages") is None
