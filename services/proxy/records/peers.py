"""The other proxy pods a trial's end is passed on to.

A sandbox's calls stay on one proxy pod (the chart's Service has client-IP affinity, and each
trial has a pod of its own), so that pod holds the trial's threads and its last records; the
env's end call comes from another pod and may land anywhere. The pod that takes the end asks
every peer to end the trial too (``?scope=process``): each waits until its own calls of the trial
are with its writer, flushes, and forgets the trial's threads. Only then are the files read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

import httpx

from rlstack.common.auth import bearer
from rlstack.common.contracts.trial_end import TrialEnd

log = logging.getLogger(__name__)
PEER_SCOPE = "process"


class Peers:
    def __init__(self, urls: list[str], dns_name: str | None, port: int, timeout: float) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.dns_name, self.port = dns_name, port
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=3.0))
        self.own: set[str] | None = None
        """This pod's addresses (looked up at the first end that resolves ``dns_name``): its own entry in
        the headless Service's answer is skipped."""

    async def addresses(self) -> list[str]:
        urls = list(self.urls)
        if self.dns_name:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(self.dns_name, self.port, type=socket.SOCK_STREAM)
            except OSError as exc:  # no peers ready (or DNS down): this pod's own part still counts
                log.warning("peers: cannot resolve %s (%s)", self.dns_name, exc)
                infos = []
            if self.own is None:
                self.own = await _own_addresses()
            for ip in sorted({info[4][0] for info in infos} - self.own):
                host = f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
                urls.append(f"http://{host}:{self.port}")
        return urls

    async def end(self, run: str, trial: str, token: str) -> TrialEnd:
        """Every peer's part of ending the trial, all at once (no records: the caller reads the files); a
        peer that does not answer is named (a dead pod refuses the connection or costs the 3 s connect
        timeout), and the others still count."""
        urls = await self.addresses()
        replies = await asyncio.gather(*(self._end_one(url, run, trial, token) for url in urls))
        ended = TrialEnd(run=run, trial=trial)
        for url, reply in zip(urls, replies, strict=True):
            if reply is None:
                ended.unreached.append(url)
            else:
                ended.in_flight += reply.in_flight
        return ended

    async def _end_one(self, url: str, run: str, trial: str, token: str) -> TrialEnd | None:
        try:
            r = await self.client.post(f"{url}/trials/{run}/{trial}/end", params={"scope": PEER_SCOPE}, headers=bearer(token))
            r.raise_for_status()
            return TrialEnd.model_validate_json(r.content)
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("peers: %s did not take the end of %s/%s (%r)", url, run, trial, exc)
            return None

    async def aclose(self) -> None:
        await self.client.aclose()


async def _own_addresses() -> set[str]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {info[4][0] for info in infos}
