"""`rlstack doctor` against the real local stack: green when everything answers, and a named
cause when the model name is wrong or a service is down."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import httpx

from rlstack.common.trial_keys import mint
from rlstack.ops.doctor import DoctorConfig, run_checks
from tests.conftest import PROXY_PYTHON, REPO, free_port
from tests.helpers.groups import trainer_registration
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import SECRET, sim_replica


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlstack.cli", "doctor", *args], cwd=REPO, capture_output=True, text=True, timeout=180)


def test_doctor_is_green_on_a_healthy_stack_and_explains_failures(service_factory, registry, replica, proxy, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    common = ["--proxy-url", proxy.url, "--registry-url", registry.url, "--batcher-url", batcher.url,
              "--trial-key", proxy.key("doctor", "ping")]

    healthy = doctor(*common)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "replica-0 v" in healthy.stdout and "answered" in healthy.stdout

    wrong_name = doctor(*common, "--served-model", "not-the-policy")
    assert wrong_name.returncode == 1
    assert "model-name mismatch" in wrong_name.stdout

    dead = ["--proxy-url", proxy.url, "--registry-url", registry.url, "--batcher-url", f"http://127.0.0.1:{free_port()}",
            "--trial-key", proxy.key("doctor", "ping")]
    down = doctor(*dead)
    assert down.returncode == 1 and "connection refused" in down.stdout


TEAM = [{"name": "lead", "served_names": ["claude-sonnet-*"]}, {"name": "helper", "served_names": ["claude-haiku-*"]}]


def test_doctor_checks_each_policy_and_flags_a_replica_no_policy_declares(service_factory, stack_logs, tmp_path):
    """A run of two policies (issue 53): its own registry, each policy's replica the benchmarks'
    simulated vLLM (one more under a name neither declares), a proxy and a batcher of both policies,
    each policy's trainer registered. One line per policy for the completion, the replicas and the
    batcher, each naming its policy; the stray replica fails its own line until it is gone."""
    registry = service_factory("registry", ["--probe-interval-seconds", "0.5"])
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher"), "--policies", '["lead", "helper"]'])
    for policy in ("lead", "helper"):
        httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=4, policy=policy)).raise_for_status()

    def both_routed() -> bool:
        r = httpx.get(f"{proxy.url}/readyz")
        return r.status_code == 200 and "lead-sim-0" in r.text and "helper-sim-0" in r.text

    with contextlib.ExitStack() as replicas:
        for served in ("lead", "helper"):
            replicas.enter_context(sim_replica(registry, stack_logs, served, f"{served}-sim", tpot_ms=1, completion_tokens=2))
        with sim_replica(registry, stack_logs, "evaluator", "stray", tpot_ms=1, completion_tokens=2):
            proxy = service_factory("proxy", ["--registry-url", registry.url, "--trials-dir", str(tmp_path / "trials"),
                                              "--trial-key-secret", SECRET, "--policies", json.dumps(TEAM), "--max-tokens-cap", "16",
                                              "--watch-timeout-seconds", "2"], python=PROXY_PYTHON, ready_timeout=180)
            urls = {"proxy_url": proxy.url, "registry_url": registry.url, "batcher_url": batcher.url,
                    "trial_key": mint(SECRET, "doctor", "ping"), "timeout_s": 30}
            flags = ["--proxy-url", proxy.url, "--registry-url", registry.url, "--batcher-url", batcher.url,
                     "--trial-key", urls["trial_key"], "--run-dir", str(tmp_path / "no-run")]
            wait_until(both_routed, timeout=60)
            checks = {c.name: c for c in run_checks(DoctorConfig(**urls, policies=["lead", "helper"]))}
            cli = doctor(*flags, "--policies", "lead,helper")
        assert cli.returncode == 1, cli.stdout + cli.stderr
        assert list(checks) == ["proxy alive", "completion through proxy (lead)", "completion through proxy (helper)",
                                "replicas registered (lead)", "replicas registered (helper)", "replicas of no policy",
                                "batcher (lead)", "batcher (helper)"]
        for policy in ("lead", "helper"):
            assert checks[f"completion through proxy ({policy})"].ok and f"'{policy}' answered" in checks[f"completion through proxy ({policy})"].detail
            replica = checks[f"replicas registered ({policy})"]
            assert replica.ok and replica.detail.startswith(f"1/1 ready: {policy}-sim-0 v0"), replica
            assert checks[f"batcher ({policy})"].ok and "trainer not waiting" in checks[f"batcher ({policy})"].detail
        stray = checks["replicas of no policy"]
        assert not stray.ok and stray.detail == "stray-0 serves 'evaluator'" and "proxy routes no call to them" in stray.remedy

        wait_until(lambda: all(e["model"] != "evaluator" for e in httpx.get(f"{registry.url}/v1/endpoints").json()["endpoints"]),
                   timeout=60)
        healthy = doctor(*flags, "--policies", json.dumps(TEAM))  # the proxy's own JSON reads as well
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        wrong = {c.name: c for c in run_checks(DoctorConfig(**urls, policies=["lead", "critic"]))}
        assert wrong["completion through proxy (lead)"].ok and not wrong["completion through proxy (critic)"].ok
        assert wrong["replicas registered (critic)"].detail == "none"
        assert not wrong["batcher (critic)"].ok and "policy 'critic' is not one of this batcher's" in wrong["batcher (critic)"].remedy
