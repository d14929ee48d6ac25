"""From inside a real local sandbox, on the host's tools and in a task's image: the proxy answers a
model call (host: through the bound socket and the in-sandbox forwarder; image: through the door
the env server opens in the sandbox's network namespace), and no other loopback service of the host (batcher, registry, vLLM,
the replica's sidecar) accepts a connection; the sandbox's network has a loopback and no route.

Nothing here sends traffic off this machine: "no route out" is read from the sandbox's own
interface and route tables and from a UDP ``connect`` (which sends nothing).
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from rlstack.common.trial_keys import agent_env
from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.sandboxes import LocalSandboxConfig, build_sandbox
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from tests.helpers.harbor_tasks import write_task
from tests.helpers.prebuild import SESSION
from tests.helpers.task_images import PYTHON_IMAGE, image_settings

PROBE = r'''
import errno, json, os, socket, sys, urllib.request
report = {}
body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                          "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=120) as response:
        report["proxy"] = [response.status, len(json.loads(response.read())["choices"])]
except Exception as exc:
    report["proxy"] = repr(exc)
for name, port in json.loads(sys.argv[1]).items():
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        report[name] = "connected"
    except OSError as exc:
        report[name] = errno.errorcode.get(exc.errno, str(exc))
    finally:
        s.close()
report["interfaces"] = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
report["routes"] = open("/proc/net/route").read().splitlines()[1:]
report["ipv6_routes"] = [l for l in open("/proc/net/ipv6_route").read().splitlines() if not l.endswith(" lo")]
report["listening"] = sorted({int(l.split()[1].split(":")[1], 16) for l in open("/proc/net/tcp").read().splitlines()[1:]
                              if l.split()[3] == "0A"})
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    udp.connect(("192.0.2.1", 9))  # TEST-NET-1; connect on UDP only picks a route, it sends nothing
    report["route_out"] = "found"
except OSError as exc:
    report["route_out"] = errno.errorcode.get(exc.errno, str(exc))
open("/logs/agent/net.json", "w").write(json.dumps(report))
'''


@pytest.mark.parametrize("environment", ["host", pytest.param("image", marks=pytest.mark.prebuilt("task-images"))])
def test_the_sandbox_reaches_the_proxy_and_no_other_loopback_service(environment, proxy, registry, replica, service_factory,
                                                                     tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    others = {"batcher": batcher.port, "registry": registry.port, "vllm": replica.vllm_port,
              "sidecar": replica.sidecar.port}
    proxy_port = int(proxy.url.rsplit(":", 1)[1])
    verifier = (f"#!/bin/bash\n(exec 3<>/dev/tcp/127.0.0.1/{proxy_port}) 2>/dev/null && echo reached > /logs/verifier/net.txt "
                "|| echo refused > /logs/verifier/net.txt\necho 1 > /logs/verifier/reward.txt\n")
    task = HarborTask.load(write_task(tmp_path / "tasks" / "net", test_sh=verifier, files={"probe.py": PROBE},
                                      agent_timeout_sec=180, dockerfile=PYTHON_IMAGE))
    run, trial = f"net-{environment}", "probe"
    python = sys.executable if environment == "host" else "python3"  # the image's own python3
    spec = TrialSpec(run=run, trial=trial, task=task,
                     agent=AgentSpec(name="probe", command=[python, "/app/probe.py", json.dumps(others)]),
                     env=agent_env(proxy.url, run, trial, proxy.key(run, trial)))
    if environment == "image":
        SESSION.wait("task-images")
    sandbox = build_sandbox(LocalSandboxConfig(environment=environment, work_dir=tmp_path / "workspaces",
                                               images=image_settings()))
    result = asyncio.run(run_trial(spec, sandbox, proxy.trials_dir))
    trial_dir = proxy.trials_dir / run / trial
    assert result.status == TrialStatus.OK, result.error
    report = json.loads((trial_dir / "agent" / "net.json").read_text())
    assert report["proxy"] == [200, 1]  # a real model call, through the bridge
    assert len(proxy.lines(run, trial, expect=1)) == 1  # and the proxy filed it under the trial
    for name in others:
        assert report[name] == "ECONNREFUSED", (name, report)
    assert report["interfaces"] == ["lo"] and report["routes"] == [] and report["ipv6_routes"] == []
    assert report["route_out"] == "ENETUNREACH"
    assert report["listening"] == [proxy_port]  # only the way to the proxy: no host listener is visible
    assert (trial_dir / "verifier" / "net.txt").read_text().strip() == "refused"  # the verifier has no way out
