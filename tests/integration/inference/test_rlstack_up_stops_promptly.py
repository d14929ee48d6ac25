"""SIGTERM to ``rlstack up`` mid-run: every service it started (registry, batcher, vLLM replica,
LiteLLM proxy, trainer, env server) exits 0 within a short grace of its own SIGTERM, so none has
to be killed. The run config's ``stop_grace_s`` is 20 s here, not the 60 s of a real run (whose
grace a proxy once outlasted: the trainer's and env server's in-flight work must never need it).
The example config `test_training_loop_end_to_end.py` runs, with the tiny model. In ``make matrix``,
not the suite (80 s of CI's two cores, which went past 50 min with it)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest
import yaml

from rlstack.common.process import log_tail
from tests.conftest import REPO
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.matrix

GRACE_S = 20


def test_every_service_exits_zero_within_the_grace_of_a_mid_run_sigterm(tiny_model, tmp_path):
    config = yaml.safe_load((REPO / "examples" / "local-arithmetic.yaml").read_text())
    config["runs_dir"] = str(tmp_path / "runs")
    config["stop_grace_s"] = GRACE_S
    services = {s["name"]: s for s in config["services"]}
    for name in ("inference", "trainer"):
        args = services[name]["args"]
        args[args.index("--model") + 1] = str(tiny_model)
    trainer = services["trainer"]["args"]
    trainer[trainer.index("--steps") + 1] = "1000"  # still training when the SIGTERM comes
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))

    out = (tmp_path / "up.log").open("w+")
    up = subprocess.Popen([sys.executable, "-m", "rlstack.cli", "up", str(path)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                          start_new_session=True)
    try:
        metrics = tmp_path / "runs" / "latest" / "metrics.jsonl"
        wait_until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 1 or up.poll() is not None, timeout=600)
        assert up.poll() is None, (tmp_path / "up.log").read_text()[-3000:]
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=6 * GRACE_S + 60)  # each service in turn, at most its grace
    finally:
        if up.poll() is None:
            up.kill()
    log = (tmp_path / "up.log").read_text()
    killed = re.findall(r"(\w+) ignored SIGTERM", log)
    tails = {name: log_tail(metrics.parent / "logs" / f"{name}.log", 40) for name in killed}
    assert not killed, f"killed after {GRACE_S}s: {killed}\n" + "\n".join(f"---- {n}.log\n{t}" for n, t in tails.items())
    assert "stopped: env=0, trainer=0, proxy=0, inference=0, batcher=0, registry=0" in log, log[-3000:]
