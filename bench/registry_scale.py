"""The registry at the scale users run: 64 simulated replicas heartbeating into one real registry,
watched by 8 real proxies; what the registry pays per heartbeat and how fast a dead replica leaves
every proxy's routing.

One real registry (``python -m rlstack.registry``), the replicas as ``sim_replica`` servers (most
share a few processes; each victim has a process of its own so it can die alone) heartbeating as
the inference sidecar does (every ``--heartbeat-seconds``, 5 s by default as in
``rlstack.inference``, lease 3 heartbeats), and ``--proxies`` real proxy processes that discover
replicas through the registry's long-poll watch (``proxy/routing/discovery.py``).

Measured over a quiet window: the registry's CPU time (process user + system, psutil) ÷ the
heartbeats it answered in it (its own request counter), its share of a core, the heartbeat route's
p99 in the registry, and its event-loop lag p99 (``rlstack_registry_event_loop_lag_seconds``,
``common.loop_lag``). Both p99s come from histogram buckets, interpolated as Prometheus'
``histogram_quantile`` does. The registry's CPU includes its prober: every endpoint's /v1/models is
fetched every ``probe_interval_seconds`` (2 s), which at 5 s heartbeats is 2.5 probes per heartbeat.

Then the victims, one at a time, each at a random point of the registry's probe round; every proxy's
``GET /readyz`` (its ``replicas``) and the registry's ready list are polled every ``--poll-ms``
until the victim is gone from each:

- ``kill``: SIGKILL, no deregistration (a crashed replica). Its port refuses connections, and a
  refused probe takes an endpoint out of routing at once (``registry/table.py``), so removal is
  bounded by one probe interval plus the probe round and the watch's answer to every proxy (the
  revision bump wakes every long-poll at once): at most ~``probe_interval_seconds`` + a few ms.
- ``hang``: SIGSTOP (a wedged process or a lost node: connections open, nothing answers). Each probe
  times out (``probe_timeout_seconds``, 2 s) and timeouts count only at ``probe_failure_threshold``
  (3) in a row, one per round of timeout + interval (4 s); the lease (3 heartbeats, 15 s) expiring
  also removes it. Bound: min(3 rounds ≈ 8-12 s, lease ≈ 15 s).
- ``term``: SIGTERM, the sidecar's deregistration (DELETE): removed at once, bounded by the watch.

After the registry, each proxy re-renders its router (LiteLLM's ``set_model_list``, two deployments
per replica: about 0.4-0.8 ms of CPU per deployment, ~50 ms at 64 replicas). Here every proxy
shares one core, so the last proxy's view lags the registry by the sum over proxies; in a cluster,
by one proxy's share. ``proxy_cpu_ms`` is each proxy's mean CPU during a removal (its /readyz
polls included). The polls every ``--poll-ms`` bound the resolution of every time.

Baseline in the same run: the same figures at ``--base-replicas`` replicas and ``--base-proxies``
proxy; ratios are full / baseline.

    python -m bench.registry_scale [--replicas 64 --proxies 8 --kills 5 --window 30 --heartbeat-seconds 5]

Loopback only; starts and stops its own processes (stopped by PID). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from bench.common.cli import bench_parser
from bench.common.harness import PROXY_PY, REPO, free_port, server
from bench.common.prom import buckets, cpu_seconds, listener_pid, quantile, scrape, value
from bench.common.result import emit
from rlstack.common.process import ServiceProcess, start_process

console = Console(stderr=True)
SIM = REPO / "bench" / "sim_replica.py"
PER_PROCESS = 16
"""Replicas per shared sim process: few processes, each loop light enough to answer its probes promptly."""
HEARTBEAT_ROUTE = "/v1/endpoints/{endpoint_id}"


# -- the processes --------------------------------------------------------------------------------
@dataclass
class Fleet:
    """Everything one phase started; stopped by PID, newest first."""

    tmp: Path
    registry_url: str
    procs: list[ServiceProcess] = field(default_factory=list)
    replica_ids: list[str] = field(default_factory=list)
    victims: list[tuple[str, ServiceProcess]] = field(default_factory=list)
    proxies: list[ServiceProcess] = field(default_factory=list)

    def sims(self, name: str, count: int, heartbeat_s: float) -> ServiceProcess:
        ports = [free_port() for _ in range(count)]
        cmd = [sys.executable, str(SIM), "--ports", ",".join(map(str, ports)), "--registry-url", self.registry_url,
               "--heartbeat-seconds", str(heartbeat_s), "--replica-prefix", name]
        proc = start_process(name, cmd, ports[0], self.tmp / f"{name}.log", cwd=REPO)
        self.procs.append(proc)
        self.replica_ids += [f"{name}-{i}" for i in range(count)]
        return proc

    def proxy(self, index: int) -> ServiceProcess:
        port = free_port()
        cmd = [str(PROXY_PY), "-m", "rlstack.proxy", "--port", str(port), "--registry-url", self.registry_url,
               "--trials-dir", str(self.tmp / f"trials-{index}"), "--log-level", "warning"]
        proc = start_process(f"proxy-{index}", cmd, port, self.tmp / f"proxy-{index}.log", cwd=REPO)
        self.procs.append(proc)
        self.proxies.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.proc.send_signal(signal.SIGCONT)  # a hung victim must be able to take its SIGTERM
                proc.terminate(grace=10)


async def routed(client: httpx.AsyncClient, url: str) -> set[str]:
    """The replicas a proxy routes to (its /readyz), or the registry's ready endpoints."""
    if url.endswith("/v1/endpoints"):
        data = (await client.get(url, params={"ready": "true"})).json()
        return {e["id"] for e in data["endpoints"]}
    return set((await client.get(url + "/readyz")).json().get("replicas", []))


async def wait_converged(fleet: Fleet, expect: set[str], timeout: float) -> float:
    """Until every proxy routes to exactly ``expect``; returns the seconds it took."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() - started < timeout:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                views = await asyncio.gather(*(routed(client, p.url) for p in fleet.proxies))
                if all(v == expect for v in views):
                    return time.monotonic() - started
            await asyncio.sleep(0.25)
    raise RuntimeError(f"proxies did not converge on {len(expect)} replicas in {timeout:.0f}s")


async def removal(fleet: Fleet, victim: str, proc: ServiceProcess, how: str, poll_s: float, timeout: float) -> dict:
    """Act on ``victim`` and time its departure from the registry's ready list and from each proxy."""
    targets = {"registry": fleet.registry_url + "/v1/endpoints", **{p.name: p.url for p in fleet.proxies}}
    gone: dict[str, float] = {}
    cpu0 = [cpu_seconds(p.proc.pid) for p in fleet.proxies]
    async with httpx.AsyncClient(timeout=5) as client:
        start = time.monotonic()
        if how == "kill":
            proc.proc.kill()
        elif how == "hang":
            proc.proc.send_signal(signal.SIGSTOP)
        else:
            proc.proc.send_signal(signal.SIGTERM)

        async def watch(name: str, url: str) -> None:
            while time.monotonic() - start < timeout:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    if victim not in await routed(client, url):
                        gone[name] = time.monotonic() - start
                        return
                await asyncio.sleep(poll_s)

        await asyncio.gather(*(watch(n, u) for n, u in targets.items()))
    proxy_cpu = [cpu_seconds(p.proc.pid) - c for p, c in zip(fleet.proxies, cpu0, strict=True)]
    if how == "hang":
        proc.proc.kill()  # SIGKILL ends a stopped process too
    with contextlib.suppress(Exception):
        proc.proc.wait(10)
    per_proxy = {n: round(gone[n], 3) if n in gone else None for n in targets if n != "registry"}
    seen = [v for v in per_proxy.values() if v is not None]
    return {"how": how, "victim": victim, "registry_s": round(gone["registry"], 3) if "registry" in gone else None,
            "per_proxy_s": per_proxy, "max_s": max(seen) if len(seen) == len(per_proxy) else None,
            "min_s": min(seen) if seen else None, "missed": len(per_proxy) - len(seen),
            "proxy_cpu_ms": round(1000 * sum(proxy_cpu) / len(proxy_cpu), 1)}


def measure_window(registry_url: str, pid: int, seconds: float) -> dict:
    """Registry CPU per heartbeat, its core share, heartbeat p99 and loop-lag p99 over ``seconds``."""
    before, cpu0, t0 = scrape(registry_url), cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    after, cpu1, t1 = scrape(registry_url), cpu_seconds(pid), time.monotonic()
    name, put = "rlstack_registry_http_request_seconds", {"route": HEARTBEAT_ROUTE, "method": "PUT"}
    beats = value(after, name + "_count", **put) - value(before, name + "_count", **put)
    requests = value(after, name + "_count") - value(before, name + "_count")
    lag = "rlstack_registry_event_loop_lag_seconds"
    put_p99 = quantile(buckets(before, name, **put), buckets(after, name, **put), 0.99)
    lag_p99 = quantile(buckets(before, lag), buckets(after, lag), 0.99)
    cpu, wall = cpu1 - cpu0, t1 - t0
    return {"window_s": round(wall, 1), "heartbeats": int(beats), "heartbeats_per_s": round(beats / wall, 2),
            "requests": int(requests), "cpu_s": round(cpu, 3), "core_share": round(cpu / wall, 4),
            "cpu_ms_per_heartbeat": round(1000 * cpu / max(beats, 1), 3),
            "heartbeat_p99_ms": round(1000 * put_p99, 2) if put_p99 is not None else None,
            "loop_lag_p99_ms": round(1000 * lag_p99, 2) if lag_p99 is not None else None,
            "stalled_s": value(after, "rlstack_registry_stalled_seconds_total") - value(before, "rlstack_registry_stalled_seconds_total")}


def phase(label: str, replicas: int, proxies: int, args: argparse.Namespace) -> dict:
    hows = ["kill"] * args.kills + (["hang"] if args.hang else []) + (["term"] if args.term else [])
    if len(hows) >= replicas:
        sys.exit(f"{label}: {len(hows)} victims need more than {replicas} replicas")
    console.rule(f"[bold]{label}: {replicas} replicas, {proxies} proxies")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        reg_port = free_port()
        reg_cmd = [sys.executable, "-m", "rlstack.registry", "--port", str(reg_port), "--log-level", "warning"]
        with server(reg_cmd, reg_port, "/readyz", tmp / "registry.log") as registry_url:
            fleet = Fleet(tmp, registry_url)
            try:
                shared = replicas - len(hows)
                for start in range(0, shared, PER_PROCESS):
                    fleet.sims(f"sim{start // PER_PROCESS}", min(PER_PROCESS, shared - start), args.heartbeat_seconds)
                for i in range(len(hows)):
                    fleet.victims.append((f"victim{i}-0", fleet.sims(f"victim{i}", 1, args.heartbeat_seconds)))
                for i in range(proxies):
                    fleet.proxy(i)
                with console.status(f"starting {len(fleet.procs)} processes ({proxies} proxies: LiteLLM takes a while)"):
                    for proc in fleet.procs:
                        proc.wait_ready("/health" if proc not in fleet.proxies else "/healthz", timeout=args.start_timeout)
                    converge_s = asyncio.run(wait_converged(fleet, set(fleet.replica_ids), args.start_timeout))
                console.print(f"  every proxy routes to all {replicas} replicas ({converge_s:.1f}s after the last start)")
                time.sleep(args.settle)
                reg_pid = listener_pid(reg_port)
                with console.status(f"quiet window, {args.window:.0f}s"):
                    window = measure_window(registry_url, reg_pid, args.window)
                window["cpu_ms_per_replica_s"] = round(1000 * window["core_share"] / replicas, 3)
                console.print(f"  registry: {window['cpu_ms_per_heartbeat']:.2f} ms CPU/heartbeat, "
                              f"{100 * window['core_share']:.1f}% of a core, heartbeat p99 {window['heartbeat_p99_ms']} ms, "
                              f"loop lag p99 {window['loop_lag_p99_ms']} ms")
                removals = []
                rng = random.Random(args.seed)
                for (victim, proc), how in zip(fleet.victims, hows, strict=True):
                    time.sleep(rng.uniform(0, 2.0))  # a random point of the probe round
                    with console.status(f"{how} {victim}: waiting until every proxy drops it"):
                        result = asyncio.run(removal(fleet, victim, proc, how, args.poll_ms / 1000, args.removal_timeout))
                    removals.append(result)
                    console.print(f"  {how:4s} {victim}: registry {result['registry_s']} s, proxies min {result['min_s']} "
                                  f"max {result['max_s']} s, missed {result['missed']}, CPU per proxy {result['proxy_cpu_ms']} ms")
            finally:
                fleet.stop()
    return {"replicas": replicas, "proxies": proxies, "converge_s": round(converge_s, 2), "window": window,
            "removals": removals, **summary(removals)}


def summary(removals: list[dict]) -> dict:
    """Per kind of death: the time until the last proxy dropped the victim, worst and mean over victims."""
    out: dict[str, float | None] = {}
    for how in ("kill", "hang", "term"):
        maxima = [r["max_s"] for r in removals if r["how"] == how]
        if maxima:
            done = [m for m in maxima if m is not None]
            out[f"{how}_max_s"] = max(done) if len(done) == len(maxima) else None
            out[f"{how}_mean_of_max_s"] = round(sum(done) / len(done), 3) if done else None
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--proxies", type=int, default=8)
    parser.add_argument("--base-replicas", type=int, default=8, help="baseline phase: replicas (victims included)")
    parser.add_argument("--base-proxies", type=int, default=1)
    parser.add_argument("--heartbeat-seconds", type=float, default=5.0, help="the sidecar's default (rlstack.inference)")
    parser.add_argument("--kills", type=int, default=5, help="replicas SIGKILLed one after another")
    parser.add_argument("--hang", action=argparse.BooleanOptionalAction, default=True, help="also a SIGSTOPped replica")
    parser.add_argument("--term", action=argparse.BooleanOptionalAction, default=True, help="also a SIGTERMed (deregistering) one")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of the quiet window")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between convergence and the window")
    parser.add_argument("--poll-ms", type=float, default=100.0, help="how often each proxy's /readyz is read")
    parser.add_argument("--removal-timeout", type=float, default=60.0)
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not PROXY_PY.exists():
        sys.exit("missing .venv-proxy: run `make setup` first")

    base = phase("baseline", args.base_replicas, args.base_proxies, args)
    full = phase("full", args.replicas, args.proxies, args)
    ratios = {"cpu_per_heartbeat": ratio(full["window"]["cpu_ms_per_heartbeat"], base["window"]["cpu_ms_per_heartbeat"]),
              "core_share": ratio(full["window"]["core_share"], base["window"]["core_share"]),
              "cpu_per_replica_s": ratio(full["window"]["cpu_ms_per_replica_s"], base["window"]["cpu_ms_per_replica_s"]),
              "loop_lag_p99": ratio(full["window"]["loop_lag_p99_ms"], base["window"]["loop_lag_p99_ms"]),
              "heartbeat_p99": ratio(full["window"]["heartbeat_p99_ms"], base["window"]["heartbeat_p99_ms"]),
              **{k: ratio(full.get(k), base.get(k)) for how in ("kill", "hang", "term") for k in (f"{how}_max_s", f"{how}_mean_of_max_s")}}

    table = Table(title=f"registry at scale: {args.replicas} replicas × {args.proxies} proxies vs "
                        f"{args.base_replicas} × {args.base_proxies} (heartbeat {args.heartbeat_seconds:g} s)")
    for col in ("figure", "baseline", "full", "ratio"):
        table.add_column(col, justify="right")
    rows = [("registry CPU per heartbeat (ms)", "cpu_ms_per_heartbeat", "cpu_per_heartbeat"),
            ("registry share of a core", "core_share", "core_share"),
            ("registry CPU per replica-second (ms)", "cpu_ms_per_replica_s", "cpu_per_replica_s"),
            ("heartbeat p99 in the registry (ms)", "heartbeat_p99_ms", "heartbeat_p99"),
            ("registry event-loop lag p99 (ms)", "loop_lag_p99_ms", "loop_lag_p99")]
    for title, key, rkey in rows:
        table.add_row(title, str(base["window"][key]), str(full["window"][key]), str(ratios[rkey]))
    for how, title in (("kill", "SIGKILL"), ("hang", "SIGSTOP"), ("term", "SIGTERM")):
        for stat, words in (("max_s", "worst"), ("mean_of_max_s", "mean")):
            if f"{how}_{stat}" in full:
                table.add_row(f"{title}: gone from every proxy, {words} (s)", str(base.get(f"{how}_{stat}")),
                              str(full.get(f"{how}_{stat}")), str(ratios[f"{how}_{stat}"]))
    Console().print(table)
    emit("registry_scale", args, {"heartbeat_seconds": args.heartbeat_seconds, "poll_ms": args.poll_ms, "baseline": base, "full": full},
         {k: v for k, v in ratios.items() if isinstance(v, (int, float))})


if __name__ == "__main__":
    main()
