"""Every metric a Grafana dashboard queries is exported by a running service (or by vLLM).

The whole stack runs here as real processes: the session's registry, replica (sidecar and vLLM)
and proxy, plus a batcher, a trainer taking real steps and an env server rolling out through
the proxy. Their /metrics are scraped once the trainer has stepped, and each dashboard
expression's metric names are looked up in what came back.
"""

from __future__ import annotations

import json
import re

import httpx

from tests.conftest import REPO
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import SECRET

DASHBOARDS = REPO / "charts" / "rlstack" / "dashboards"
METRIC = re.compile(r"\b((?:rlstack_|vllm:)[A-Za-z0-9_:]+)")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
CLUSTER_ONLY = {"sandboxes.json"}
"""Series of the kubernetes sandbox (its warm pool, its API requests): no env server here runs one;
tests/k8s/test_warm_pool.py checks these against a kubernetes sandbox's own registry."""


def exported(text: str) -> set[str]:
    """Sample names only: a labelled family declared (# TYPE) with no sample yet is no series to
    Prometheus, and its panel shows "No data" instead of 0 (seen on a real cluster: the batcher's
    rejections and the proxy's token-in outcomes until the first one happened)."""
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line and not line.startswith("#")}


def known(name: str, names: set[str]) -> bool:
    return name in names or any(name.endswith(s) and name.removesuffix(s) in names for s in SUFFIXES)


def test_every_dashboard_metric_is_exported(service_factory, registry, replica, proxy, tiny_model, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    trainer = service_factory("trainer", ["--model", str(tiny_model), "--batcher-url", batcher.url, "--sync-mode", "none",
                                          "--run-dir", str(tmp_path / "run"), "--steps", "2", "--batch-size", "8",
                                          "--torch-threads", "1"], ready_timeout=120)
    env = service_factory("envs", ["--batcher-url", batcher.url, "--proxy-url", proxy.url, "--registry-url", registry.url,
                                   "--group-size", "4", "--workers", "2", "--max-tokens", "4", "--run-id", "dash",
                                   "--trial-key-secret", SECRET], ready_timeout=60)
    wait_until(lambda: httpx.get(f"{trainer.url}/status").json()["step"] >= 1, timeout=180)

    urls = [registry.url, batcher.url, trainer.url, env.url, proxy.url, replica.sidecar.url, replica.vllm_url]
    names: set[str] = set()
    for url in urls:
        r = httpx.get(f"{url}/metrics", timeout=10)
        assert r.status_code == 200, url
        names |= exported(r.text)

    missing = {}
    for board in sorted(b for b in DASHBOARDS.glob("*.json") if b.name not in CLUSTER_ONLY):
        exprs = [t["expr"] for p in json.loads(board.read_text())["panels"] for t in p["targets"]]
        queried = {m for e in exprs for m in METRIC.findall(e)}
        assert queried, board.name
        missing.update({m: board.name for m in queried if not known(m, names)})
    assert not missing, f"dashboards query metrics nobody exports: {missing}"
