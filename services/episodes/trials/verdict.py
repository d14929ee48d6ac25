"""Whether an agent's own exit is the policy's outcome or an infrastructure failure, from evidence.

The exit code belongs to the policy: an agent that answers wrongly and then ``exit 1``s or
``kill -9``s itself must not turn its zero into "no reward" (then retried, its group dropped),
or crashing becomes the way to dodge every zero. So a trial whose agent exited non-zero
(or by a signal) on its own, before its timeout, is scored with the verifier's reward when the
evidence says the infrastructure held: the proxy logged at least one answered model call and
no failed one for the trial, and the sandbox itself raised no error (a sandbox error never gets
here: it is ``infra_error`` already). A failed call (the proxy or a replica broke), or no
answered call at all (the policy never acted; the agent could not reach the proxy), keeps the
trial unscored. A verifier that wrote no reward keeps it unscored too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rlstack.common.contracts.trajectory import TrajectoryRecord
from rlstack.episodes.trials.records import TrialResult, TrialStatus
from rlstack.episodes.trials.reward import RewardError, scalar_reward

log = logging.getLogger(__name__)


def judge_agent_exit(result: TrialResult, records: Sequence[TrajectoryRecord]) -> TrialResult:
    """``result`` re-judged with the trial's model calls (``read_trajectory``); unchanged unless an
    ``agent_error`` turns out to be the policy's own doing, then ``ok`` with the verifier's reward."""
    run = result.agent.run
    if result.status != TrialStatus.AGENT_ERROR or run is None or run.timed_out:
        return result
    failed = sum(r.status != "ok" for r in records)
    answered = sum(r.status == "ok" for r in records)
    if failed:
        result.error = f"{result.error}; {failed} failed model call(s): not the policy's outcome"
        return result
    if not answered:
        result.error = f"{result.error}; no answered model call: not the policy's outcome"
        return result
    if result.verifier.rewards is None:
        return result
    try:
        reward = scalar_reward(result.verifier.rewards)
    except RewardError:
        return result
    log.info("trial %s/%s: agent exited with %s after %d answered call(s) and none failed: scored %g",
             result.run, result.trial, run.exit_code, answered, reward)
    result.status, result.reward, result.error = TrialStatus.OK, reward, None
    return result
