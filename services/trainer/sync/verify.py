"""Every sync is checked: each replica must serve the weights it was sent.

An in-place weight update can report success and still serve something else (a stale CPU GEMM
handle, a half-applied layer, a wrong adapter): vLLM has an open tracker for reload correctness
in RL. After each sync the trainer asks every replica for its prompt logprobs of a fixed probe
sequence and compares them with its own under the same weights. A replica that is off by more
than its dtype allows is reported in ``SyncReport.failed`` and quarantined in the registry (no
routing) until a later sync passes or it restarts. One forward pass of ``PROBE_LENGTH`` tokens
per replica, a fixed cost whatever the model's size (``bench/weight_sync.py`` prints it beside
the sync: 0.15-0.18 s on the 3.5M-parameter demo model on 2 cores).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import httpx

from rlstack.common.contracts.registry import Endpoint
from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync import ProbeResult, ReplicasAway, SyncFailed, SyncReport, WeightPublisher
from rlstack.trainer.verify_config import TOLERANCES, Tolerance

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

PROBE_LENGTH = 32
PROBE_VOCAB_CAP = 32000
"""Probe ids stay below this (and the model's vocabulary): padded vocabularies have ids past the
tokenizer's last real token, which vLLM refuses in a prompt."""


def probe_tokens(vocab_size: int, length: int = PROBE_LENGTH) -> list[int]:
    """A fixed pseudo-random token sequence (the same on every run, machine and rank)."""
    bound = max(2, min(vocab_size, PROBE_VOCAB_CAP))
    state, out = 20251123, []
    for _ in range(length):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(1 + (state >> 33) % (bound - 1))
    return out


def trainer_logprobs(model: torch.nn.Module, tokens: list[int]) -> list[float]:
    """log p(token t+1 | tokens <= t) under the trainer's weights, in float32."""
    import torch

    from rlstack.trainer.step import policy_logprobs

    if hasattr(model, "probe_logprobs"):  # a sharded policy: every rank takes part in the forward
        return model.probe_logprobs(tokens)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ids = torch.tensor([tokens[:-1]], device=device)
            lp = policy_logprobs(model, ids, torch.ones_like(ids), torch.tensor([tokens[1:]], device=device))
    finally:
        model.train(was_training)
    return lp[0].float().tolist()


async def replica_logprobs(client: httpx.AsyncClient, url: str, served: str, tokens: list[int]) -> list[float]:
    body = {"model": served, "prompt": tokens, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0}
    r = await client.post(f"{url}/v1/completions", json=body)
    r.raise_for_status()
    per_token = r.json()["choices"][0]["prompt_logprobs"][1:]
    # vLLM lists the prompt token itself first (and the top-0 extras after it)
    return [float(next(iter(d.values()))["logprob"]) for d in per_token]


async def replica_dtype(client: httpx.AsyncClient, url: str) -> str | None:
    """The dtype the replica computes in, as its worker reports it (our worker extension)."""
    r = await client.post(f"{url}/collective_rpc", json={"method": "rlstack_weight_state"})
    if r.status_code != 200:
        return None
    states = [s for s in r.json().get("results", []) if isinstance(s, dict)]
    return states[0].get("dtype") if states else None


def compare(want: list[float], got: list[float], dtype: str | None, override: Tolerance | None) -> tuple[float, float, bool]:
    if len(want) != len(got):
        raise ValueError(f"replica returned {len(got)} logprobs for {len(want)} probe positions")
    gaps = [abs(a - b) for a, b in zip(want, got)]
    mean_abs, max_abs = statistics.fmean(gaps), max(gaps)
    tol = override or TOLERANCES.get(dtype or "", TOLERANCES["bfloat16"])
    return mean_abs, max_abs, mean_abs <= tol.mean_abs and max_abs <= tol.max_abs


class ServedWeightsCheck:
    def __init__(self, registry: RegistryClient, served_model_name: str, headers: dict[str, str], tolerance: Tolerance | None = None,
                 timeout_s: float = 60.0) -> None:
        self.registry = registry
        self.served_model_name = served_model_name
        self.headers = headers
        self.tolerance = tolerance
        """Override for every replica; by default each replica's own dtype picks from TOLERANCES."""
        self.timeout_s = timeout_s

    async def run(self, model: torch.nn.Module, report: SyncReport) -> SyncReport:
        """Probe every replica the sync reached; move the ones that fail into ``failed`` and quarantine them."""
        start = time.perf_counter()
        tokens = probe_tokens(int(model.config.vocab_size))
        want = await asyncio.to_thread(trainer_logprobs, model, tokens)
        targets = {e.id: e for e in await self.registry.sync_targets(self.served_model_name) if e.id in report.replicas}
        served = report.served_name or self.served_model_name
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers) as client:
            results = await asyncio.gather(*(self._probe(client, e, served, tokens, want) for e in targets.values()))
        passed, failed = [], dict(report.failed)
        for result in results:
            endpoint = targets[result.replica]
            if result.passed:
                passed.append(result.replica)
                if endpoint.quarantine is not None:
                    await self._tell_registry(self.registry.release(result.replica), result.replica)
                continue
            reason = result.error or (f"weights v{report.version}: probe logprobs off by {result.mean_abs:.4f} mean, "
                                      f"{result.max_abs:.4f} max (dtype {result.dtype})")
            failed[result.replica] = f"served-weights check failed: {reason}"
            log.error("replica %s failed the served-weights check: %s", result.replica, reason)
            await self._tell_registry(self.registry.quarantine(result.replica, reason), result.replica)
        # A replica that left the registry between the sync and the check is not counted as serving.
        unchecked = [r for r in report.replicas if r not in targets]
        report = report.model_copy(update={
            "replicas": passed, "failed": failed, "verify_seconds": time.perf_counter() - start,
            "probes": {r.replica: r for r in results}, "unchecked": unchecked})
        if (results or unchecked) and not passed:
            # Killed mid-check: refused or timed out, or already gone from the registry (its sidecar
            # deregistered it): gone, not wrong, so worth waiting for; a wrong answer is not.
            away = [r.replica for r in results if not r.answered] + unchecked
            if away:
                raise ReplicasAway(f"no replica serves weights v{report.version}: {failed or {r: 'left the registry' for r in unchecked}}", away)
            raise SyncFailed(f"no replica serves weights v{report.version}: {failed}")
        return report

    async def wait_back(self, replicas: list[str], deadline: float, poll_s: float = 1.0) -> bool:
        """Until one of ``replicas`` is a sync target again and its server answers (a restarted vLLM:
        right after a kill the registry may still list the old one); False at ``deadline``."""
        async with httpx.AsyncClient(timeout=5.0, headers=self.headers) as client:
            while time.monotonic() < deadline:
                try:
                    targets = [e for e in await self.registry.sync_targets(self.served_model_name) if e.id in replicas]
                except httpx.HTTPError:
                    targets = []
                for endpoint in targets:
                    try:
                        if (await client.get(f"{str(endpoint.url).rstrip('/')}/health")).status_code == 200:
                            return True
                    except httpx.HTTPError:
                        pass
                await asyncio.sleep(poll_s)
        return False

    @staticmethod
    async def _tell_registry(call: Awaitable[None], replica: str) -> None:
        """A registry that is briefly away must not stop training: the verdict is in the report either
        way, and the next sync's check acts on the registry again."""
        try:
            await call
        except httpx.HTTPError as exc:
            log.warning("registry not updated for %s: %s", replica, exc)

    async def _probe(self, client: httpx.AsyncClient, endpoint: Endpoint, served: str, tokens: list[int],
                     want: list[float]) -> ProbeResult:
        url = str(endpoint.url).rstrip("/")
        dtype = None
        try:
            dtype = await replica_dtype(client, url)
            got = await replica_logprobs(client, url, served, tokens)
            mean_abs, max_abs, ok = compare(want, got, dtype, self.tolerance)
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            gone = isinstance(exc, httpx.TransportError) or (isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code >= 500)
            return ProbeResult(replica=endpoint.id, dtype=dtype, passed=False, answered=not gone,
                               error=f"probe failed: {type(exc).__name__}: {exc}")
        return ProbeResult(replica=endpoint.id, dtype=dtype, mean_abs=mean_abs, max_abs=max_abs, passed=ok)


class VerifiedPublisher:
    """Any publisher, followed by the served-weights check of every replica it reached.

    When no replica passed because some did not answer (a vLLM killed mid-check, restarted by its
    supervisor), the trainer waits up to ``away_wait_s`` for one to come back, publishes to it again
    (a restart may have loaded older weights) and checks again, instead of failing the run."""

    def __init__(self, inner: WeightPublisher, check: ServedWeightsCheck, away_wait_s: float = 300.0) -> None:
        self.inner = inner
        self.check = check
        self.away_wait_s = away_wait_s

    async def publish(self, model, version: int) -> SyncReport:  # noqa: ANN001 - a transformers or peft model
        deadline: float | None = None
        while True:
            try:
                return await self.check.run(model, await self.inner.publish(model, version))
            except ReplicasAway as away:
                deadline = deadline or time.monotonic() + self.away_wait_s
                log.warning("weights v%d: replica(s) %s did not answer the served-weights check; waiting up to %.0fs "
                            "for one to come back, then publishing and checking again", version, ", ".join(away.replicas),
                            max(0.0, deadline - time.monotonic()))
                if not await self.check.wait_back(away.replicas, deadline):
                    raise SyncFailed(f"{away}; no replica came back within {self.away_wait_s:.0f}s") from away
                log.info("weights v%d: replica(s) back; publishing again", version)

    async def aclose(self) -> None:
        await self.inner.aclose()
