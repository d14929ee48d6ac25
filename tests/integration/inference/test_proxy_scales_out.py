"""Several proxy processes (a second "pod" running two workers, beside the session's proxy)
share one trials directory: every call of every trial is logged exactly once, whole, whichever
process served it, the workers' metrics add up on one /metrics, a trial's end taken by one pod
reaches the pod that served the trial, and a thread goes on, on its exact ids, in whichever
process its next call lands (another pod, another worker, a pod that took over from a dead one)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from rlstack.common.contracts.trajectory import TrajectoryRecord, read_trajectory, trajectory_files
from tests.conftest import PROXY_PYTHON, start_service
from tests.integration.inference.conftest import SECRET

TRIALS, CALLS_PER_TRIAL = 12, 4


@pytest.fixture
def two_worker_proxy(registry, replica, proxy, stack_logs):
    svc = start_service(
        "proxy",
        ["--registry-url", registry.url, "--trials-dir", str(proxy.trials_dir), "--trial-key-secret", SECRET,
         "--max-tokens-cap", "64", "--watch-timeout-seconds", "2", "--workers", "2", "--peer-urls", proxy.url],
        stack_logs, python=PROXY_PYTHON, ready_timeout=180,
    )
    yield svc
    assert svc.terminate(grace=60) == 0


def worker_pids(parent: int) -> set[int]:
    children = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        if re.search(rf"^PPid:\s+{parent}$", text, re.M) and "spawn_main" in (status.parent / "cmdline").read_bytes().decode(errors="replace"):
            children.add(int(status.parent.name))
    return children


async def one_trial(urls: list[str], proxy, trial: str) -> list[str]:
    """The trial's calls alternate between proxies, each on a new connection (so the kernel picks the worker)."""
    answers = []
    for n in range(CALLS_PER_TRIAL):
        body = {"model": "policy", "messages": [{"role": "user", "content": f"{trial} call {n}: 2 + {n}?"}], "max_tokens": 4}
        async with httpx.AsyncClient(timeout=120) as client:
            r = await client.post(f"{urls[n % len(urls)]}/v1/chat/completions", json=body,
                                  headers={"Authorization": f"Bearer {proxy.key('scale', trial)}"})
        assert r.status_code == 200, r.text
        answers.append(r.json()["id"])
    return answers


def test_many_writers_lose_and_interleave_nothing(proxy, two_worker_proxy):
    assert len(worker_pids(two_worker_proxy.proc.pid)) == 2

    async def everything() -> list[list[str]]:
        return await asyncio.gather(*(one_trial([proxy.url, two_worker_proxy.url], proxy, f"t{i}") for i in range(TRIALS)))

    asyncio.run(everything())
    writers: set[str] = set()
    for i in range(TRIALS):
        trial_dir = proxy.trials_dir / "scale" / f"t{i}"
        records = proxy_lines_settled(trial_dir, CALLS_PER_TRIAL)
        assert len(records) == CALLS_PER_TRIAL
        assert [r.request["messages"][0]["content"] for r in records] == [f"t{i} call {n}: 2 + {n}?" for n in range(CALLS_PER_TRIAL)]
        assert all(r.status == "ok" and r.choices[0].completion_token_ids for r in records)
        files = trajectory_files(trial_dir)
        assert len(files) >= 2  # calls went to both proxies: never two writers on one file
        writers.update(f.name for f in files)
    assert len(writers) >= 2

    # Each worker counts its own calls; whichever answers the scrape renders the sum.
    metrics = httpx.get(f"{two_worker_proxy.url}/metrics").text
    served = sum(float(v) for v in re.findall(r'^rlstack_proxy_calls_total\{api="openai",[^}]*status="ok"[^}]*\} (\S+)$', metrics, re.M))
    assert served == TRIALS * CALLS_PER_TRIAL // 2


def test_an_end_taken_by_another_pod_reaches_the_pod_that_served_the_trial(proxy, two_worker_proxy):
    """The chart keeps a sandbox's calls on one pod, but the env's end lands on any: the pod that takes
    it passes it on, so the serving pod logs everything and forgets the trial's threads."""
    from rlstack.common.contracts.trial_end import TrialEnd, end_token
    from tests.integration.inference.test_proxy_token_in import openai_turn

    run, trial = "scale", "ended-elsewhere"
    key = proxy.key(run, trial)
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]
    for n in range(2):
        messages += [openai_turn(proxy, key, messages, stream=False), {"role": "user", "content": f"step {n}"}]
    assert proxy.lines(run, trial, expect=2)[1]["splice"] is not None  # the serving pod holds the thread

    url = f"{two_worker_proxy.url}/trials/{run}/{trial}/end"
    token = {"Authorization": f"Bearer {end_token(SECRET, run, trial)}"}
    bad = httpx.post(url, params={"scope": "everything"}, headers=token, timeout=60)
    assert bad.status_code == 400 and "scope" in bad.text
    reply = httpx.post(url, headers=token, timeout=60)
    assert reply.status_code == 200, reply.text
    ended = TrialEnd.model_validate_json(reply.content)
    assert ended.in_flight == 0 and ended.unreached == [] and len(ended.records) == 2
    # The serving pod forgot the trial's threads: a late call there is not spliced onto them.
    openai_turn(proxy, key, messages, stream=False)
    assert proxy.lines(run, trial, expect=3)[-1]["splice"] is None


def one_worker_proxy(registry, proxy, stack_logs):
    return start_service(
        "proxy",
        ["--registry-url", registry.url, "--trials-dir", str(proxy.trials_dir), "--trial-key-secret", SECRET,
         "--max-tokens-cap", "64", "--watch-timeout-seconds", "2"],
        stack_logs, python=PROXY_PYTHON, ready_timeout=180,
    )


def assert_one_thread(lines: list[dict]) -> None:
    """Every call after the first is sent on the exact ids of the call before it."""
    for before, after in zip(lines, lines[1:], strict=False):
        exact = before["prompt_token_ids"] + before["choices"][0]["completion_token_ids"]
        assert after["splice"] is not None and after["splice"]["onto"] == before["request_id"], after["splice"]
        assert after["prompt_token_ids"][: len(exact)] == exact


def test_a_thread_goes_on_in_another_pod_when_the_pod_that_served_it_dies(registry, replica, proxy, stack_logs):
    from tests.integration.inference.test_proxy_token_in import openai_turn

    run, trial = "scale", "pod-died"
    key = proxy.key(run, trial)
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]
    doomed = one_worker_proxy(registry, proxy, stack_logs)
    try:
        messages += [openai_turn(doomed, key, messages, stream=False), {"role": "user", "content": "step 0"}]
        messages += [openai_turn(doomed, key, messages, stream=False), {"role": "user", "content": "step 1"}]
        proxy.lines(run, trial, expect=2)  # logged before the pod dies, as the calls of a live pod are
    finally:
        doomed.proc.kill()
        doomed.proc.wait(30)
    for n in range(2, 4):  # the Service now sends the sandbox's calls to the surviving pod
        messages += [openai_turn(proxy, key, messages, stream=False), {"role": "user", "content": f"step {n}"}]
    lines = proxy.lines(run, trial, expect=4)
    assert len(lines) == 4
    assert_one_thread(lines)
    assert lines[0]["splice"] is None and all(r["thread"] is not None for r in lines)
    metrics = httpx.get(f"{proxy.url}/metrics").text
    assert re.search(r"^rlstack_proxy_thread_heads_adopted_total [1-9]", metrics, re.M)


def test_a_thread_whose_calls_alternate_between_pods_stays_one_thread(proxy, two_worker_proxy):
    """Each process, holding a head the other has since continued, takes up the newer head from the
    log rather than splicing onto its own (which would re-render the other's reply)."""
    from tests.integration.inference.test_proxy_token_in import openai_turn

    run, trial = "scale", "alternating"
    key = proxy.key(run, trial)
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]
    for n in range(5):
        at = (proxy, two_worker_proxy)[n % 2]
        messages += [openai_turn(at, key, messages, stream=False), {"role": "user", "content": f"step {n}"}]
        proxy.lines(run, trial, expect=n + 1)  # a tool runs between calls: the record is written by then
    lines = proxy.lines(run, trial, expect=5)
    assert len(trajectory_files(proxy.trials_dir / run / trial)) >= 2
    assert_one_thread(lines)


def proxy_lines_settled(trial_dir: Path, expect: int, timeout: float = 20.0) -> list[TrajectoryRecord]:
    import time

    deadline = time.monotonic() + timeout
    records = read_trajectory(trial_dir)
    while len(records) < expect and time.monotonic() < deadline:
        time.sleep(0.1)
        records = read_trajectory(trial_dir)
    return records
