"""An agent that answers wrongly and then crashes on purpose (``exit 1``, ``kill -9 $$``) gets the
verifier's 0, as the env server judges it: real sandbox, real proxy, the trial's own records.
One that crashes before any model call stays unscored (its exit is not the policy's doing)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.common.trial_keys import agent_env
from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.sandboxes import LocalSandboxConfig
from rlstack.episodes.sandboxes.local import LocalSandbox
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from rlstack.episodes.trials.verdict import judge_agent_exit
from tests.helpers.harbor_tasks import write_task

CALL = (f"{sys.executable} -c \"import json, os, urllib.request as u; u.urlopen(u.Request(os.environ['OPENAI_BASE_URL'] + "
        "'/chat/completions', data=json.dumps({'model': 'policy', 'max_tokens': 2, 'messages': [{'role': 'user', "
        "'content': 'hi'}]}).encode(), headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], "
        "'Content-Type': 'application/json'}), timeout=120).read()\"")
TEST = "#!/bin/bash\nif grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"


@pytest.mark.parametrize(("name", "script", "scored"), [
    ("exits-1", f"{CALL} && echo 41 > answer.txt && exit 1", True),
    ("kills-itself", f"{CALL} && echo 41 > answer.txt && kill -9 $$", True),
    ("no-call", "echo 41 > answer.txt; exit 1", False),
])
def test_a_wrong_answer_then_a_crash_scores_zero(proxy, tmp_path, name, script, scored):
    task = HarborTask.load(write_task(tmp_path / "tasks" / "answer", test_sh=TEST))
    spec = TrialSpec(run="crash", trial=name, task=task, agent=AgentSpec(name="sh", command=["sh", "-c", script]),
                     env=agent_env(proxy.url, "crash", name, proxy.key("crash", name)))
    sandbox = LocalSandbox(LocalSandboxConfig(environment="host", work_dir=tmp_path / "workspaces"))
    result = asyncio.run(run_trial(spec, sandbox, proxy.trials_dir))
    assert result.status == TrialStatus.AGENT_ERROR and result.agent.run.exit_code != 0
    records = proxy.lines("crash", name, expect=1) and read_trajectory(proxy.trials_dir / "crash" / name) if scored else []
    judged = judge_agent_exit(result, records)
    if scored:
        assert judged.status == TrialStatus.OK and judged.reward == 0.0, judged.error
    else:
        assert judged.status == TrialStatus.AGENT_ERROR and judged.reward is None
