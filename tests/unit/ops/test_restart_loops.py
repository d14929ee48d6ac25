"""``rlstack doctor`` names a service in a restart loop: from a local run's restarts.json, and from
the release's pods as the kubelet reports them (lightkube's own Pod model, no API server)."""

import json
import subprocess
import sys

from lightkube.resources.core_v1 import Pod

from rlstack.ops.restart_loops import check_local_restarts, judge_pod_restarts


def test_a_local_run_names_the_service_that_keeps_dying(tmp_path):
    run = tmp_path / "restarts-1"
    run.mkdir()
    assert check_local_restarts(run).ok and check_local_restarts(tmp_path / "absent") is None
    (run / "restarts.json").write_text(json.dumps({"registry": {"restarts": 1, "in_a_row": 1, "exit_codes": [-9]},
                                                   "proxy": {"restarts": 4, "in_a_row": 4, "exit_codes": [1, 1, 1, 1]}}))
    check = check_local_restarts(run)
    assert not check.ok and "['proxy'] in a restart loop" in check.remedy and "logs/proxy.log" in check.remedy
    assert "registry restarted 1x" in check.detail


def container(name: str, restarts: int, waiting: str | None = None, ready: bool = True) -> dict:
    status = {"name": name, "image": "i", "imageID": "", "ready": ready, "restartCount": restarts,
              "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}}}
    if restarts:
        status["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    return status


def pod(name: str, *containers: dict) -> Pod:
    return Pod.from_dict({"metadata": {"name": name}, "status": {"phase": "Running", "containerStatuses": list(containers)}})


def test_a_pod_in_crash_loop_back_off_is_named_with_how_it_died():
    healthy = [pod("rl-batcher-0", container("batcher", 0)), pod("rl-proxy-1", container("proxy", 1))]
    assert judge_pod_restarts(healthy).ok  # one restart (a drained node) is no loop
    looping = judge_pod_restarts([*healthy, pod("rl-env-agent-7", container("env", 6, "CrashLoopBackOff", ready=False))])
    assert not looping.ok
    assert "rl-env-agent-7/env restarted 6x, last exit 137 (OOMKilled)" in looping.remedy
    assert "kubectl logs --previous rl-env-agent-7" in looping.remedy


def test_doctor_reads_the_latest_run_by_default(tmp_path):
    run = tmp_path / "runs" / "x-1"
    run.mkdir(parents=True)
    (tmp_path / "runs" / "latest").symlink_to("x-1")
    (run / "restarts.json").write_text(json.dumps({"env": {"restarts": 3, "in_a_row": 3, "exit_codes": [1, 1, 1]}}))
    done = subprocess.run([sys.executable, "-m", "rlstack.cli", "doctor", "--proxy-url", "http://127.0.0.1:9",
                           "--registry-url", "http://127.0.0.1:9", "--batcher-url", "http://127.0.0.1:9"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "service restarts" in done.stdout and "restart loop" in done.stdout, done.stdout + done.stderr
