"""Bench plumbing for reading a service's own figures: Prometheus text scraped and summed, histogram
quantiles over a window between two scrapes (as ``histogram_quantile`` computes them), a process's
CPU seconds, and which process listens on a port."""

from __future__ import annotations

import contextlib

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str, timeout: float = 10.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a Prometheus text page, by sample name."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=timeout).text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return sum(v for lbl, v in samples.get(name, []) if all(lbl.get(k) == x for k, x in labels.items()))


def buckets(samples: dict, name: str, **labels: str) -> dict[float, float]:
    out: dict[float, float] = {}
    for lbl, v in samples.get(name + "_bucket", []):
        if all(lbl.get(k) == x for k, x in labels.items()):
            le = float(lbl["le"])
            out[le] = out.get(le, 0.0) + v
    return out


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """``histogram_quantile`` over the window between two scrapes of cumulative buckets (seconds)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, cumulative in zip(bounds, counts, strict=True):
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(cumulative - below, 1e-9)
        lower, below = bound, cumulative
    return lower


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system seconds of a process and its threads; with ``children``, of its live descendants
    too (a server's ``--workers N``)."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *(root.children(recursive=True) if children else [])]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def listener_pid(port: int) -> int:
    """The process listening on ``port`` on loopback; for a uvicorn worker (``--workers N``), its parent."""
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            if "multiprocessing" in " ".join(psutil.Process(conn.pid).cmdline()):
                return psutil.Process(conn.pid).parent().pid
            return conn.pid
    raise RuntimeError(f"nothing listens on port {port}")
