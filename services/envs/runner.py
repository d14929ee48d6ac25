"""The env server's loop: register with the batcher, roll out groups through the proxy, score
them, post them, and hold back while the batcher already has enough waiting.

Talks to the batcher (Atropos API), the proxy (OpenAI API with ``n = group_size``; each choice comes
back with the weight versions that sampled it) and, optionally, the registry (the staleness gate,
and a group's label when the proxy gives no versions).
A batcher that is away is waited for; one that refuses this env, or any other error, ends
``run()``, and the app's supervisor fails the process so a restart registers afresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterator
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge

from rlstack.common.auth import bearer
from rlstack.common.batcher_client import BatcherClient, BatcherRefused
from rlstack.common.contracts.atropos import EnvRegistration, EnvStatus, HoldReason
from rlstack.common.registry_client import RegistryClient
from rlstack.common.weight_versions import policy_version, sampling_version
from rlstack.envs.config import EnvSettings
from rlstack.envs.replica_wait import wait_for_a_replica
from rlstack.envs.rollout import build_group, completion_parts
from rlstack.envs.tasks import build_task

log = logging.getLogger(__name__)
BATCHER_RETRY_SECONDS = 1.0
SINGLE_TURN_TOKEN_LIMIT = 2048


class EnvMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.rollouts = Counter("rlstack_env_rollouts", "Completions generated and scored", ["env"], registry=registry)
        self.groups_posted = Counter("rlstack_env_groups_posted", "Groups accepted by the batcher", ["env"], registry=registry)
        self.groups_dropped = Counter("rlstack_env_groups_dropped", "Groups that could not be produced or posted", ["env"], registry=registry)
        self.reward_mean = Gauge("rlstack_env_reward_mean", "Mean reward over the last 100 completions", ["env"], registry=registry)


class EnvRunner:
    def __init__(self, settings: EnvSettings, metrics: EnvMetrics, task: Any = None) -> None:
        self.s = settings
        self.metrics = metrics
        self.task = task if task is not None else build_task(settings.task, settings.task_spec, settings.task_context)
        self.problems: Iterator[Any] = self.task.stream()
        self.env_id: int | None = None
        self.batch_size: int | None = None
        self.batch_sizes: dict[str, int] = {}
        """With several policies, each one's trainer's batch size (the first's is ``batch_size`` too)."""
        self.waiting_policies: set[str] = set()
        """With several policies, those whose trainer waits for a batch (the last status poll's, at least
        every ``lease_renew_seconds``): the staleness gate never holds a policy back from its own batch."""
        self.finished_policies: set[str] = set()
        """With several policies, those whose trainer has taken all its steps (the last status poll's):
        nothing waits on them, so a policy that finishes first never holds the others back."""
        self.batch_fill = "exact"
        """How the trainer takes batches: agent groups of several rows per trial need ``at_least``."""
        self.trainer_token_limit: int | None = None
        """The trainer's max_token_len (Atropos /info): no sequence posted is longer."""
        self.recent_rewards: deque[float] = deque(maxlen=100)
        self.holding_back: HoldReason | None = None
        """Why the last decision started nothing (sent with every status poll), or None."""
        token = settings.batcher_token.get_secret_value() if settings.batcher_token else None
        self.batcher = BatcherClient(str(settings.batcher_url), token)
        self.proxy = httpx.AsyncClient(base_url=str(settings.proxy_url).rstrip("/"), timeout=600)
        self.registry = RegistryClient(str(settings.registry_url)) if settings.registry_url else None

    @property
    def registered(self) -> bool:
        return self.env_id is not None

    async def register(self) -> None:
        """Register with the batcher, waiting while it is away or has no trainer yet (not ready meanwhile)."""
        registration = EnvRegistration(max_token_length=await self.token_limit(), desired_name=self.s.name, weight=1.0,
                                       group_size=self.s.group_size)
        last_problem = None
        while True:
            try:
                reply = await self.batcher.register_env(registration)
                problem = None if reply.status == "success" else reply.model_dump(exclude_none=True)
            except (httpx.HTTPError, ValueError) as exc:  # away, or a proxy in front answering non-JSON
                reply, problem = None, f"batcher unavailable: {exc!r}"
            if reply is not None and reply.env_id is not None and problem is None:
                self.env_id = reply.env_id
                break
            if problem != last_problem:  # say why once, then keep trying: the trainer may (re)register
                log.warning("not registered yet: %s", problem)
                last_problem = problem
            await asyncio.sleep(BATCHER_RETRY_SECONDS)
        info = await self.batcher.info()
        self.batch_size = info.batch_size
        self.batch_fill = info.batch_fill
        self.trainer_token_limit = info.max_token_len if info.max_token_len > 0 else None
        first, *others = self.s.policy_names or [None]
        if first is not None:  # several: each trainer's own batch, and the tightest token limit
            self.batch_sizes[first] = info.batch_size  # the first's is the unnamed /info just read
        for policy in others:
            info = await self.batcher.info(policy)
            self.batch_sizes[policy] = info.batch_size
            if info.max_token_len > 0:
                self.trainer_token_limit = min(self.trainer_token_limit or info.max_token_len, info.max_token_len)
        log.info("registered as env %d (%s); batch size %d%s", self.env_id, self.s.name, self.batch_size,
                 f" (by policy: {self.batch_sizes})" if self.batch_sizes else "")

    async def token_limit(self) -> int:
        """Longest sequence posted: single-turn prompts and answers are short."""
        return self.s.max_token_length or SINGLE_TURN_TOKEN_LIMIT

    async def backlog_full(self) -> bool:
        """Whether enough of this env's own groups already wait: its share (``env_weight``) of
        ``max_batches_offpolicy`` batches, and at least one group. Groups other envs left in the
        queue (an env removed by an upgrade, a trainer that has finished) never hold it back, and
        nothing does while the trainer waits for a batch: a share computed from stale bookkeeping
        (a dead env still counted) must never keep the queue below a batch.
        httpx errors are transient, ``BatcherRefused`` is not."""
        status = await self.batcher.env_status(self.env_id, self.holding_back)
        self._note_policies(status)
        if status.policies:  # several: full when some training policy's own backlog is, unless any trainer waits
            training = [p for p in status.policies.values() if not p.trainer_done]
            if any(p.trainer_waiting for p in training):
                return False
            return any(p.self_queue_size * self.s.group_size
                       >= max(self.s.max_batches_offpolicy * (p.batch_size or self.s.group_size) * status.env_weight,
                              self.s.group_size)
                       for p in training)
        if status.trainer_waiting:
            return False
        own_sequences = status.self_queue_size * self.s.group_size
        share = self.s.max_batches_offpolicy * (self.batch_size or self.s.group_size) * status.env_weight
        return own_sequences >= max(share, self.s.group_size)

    def served(self, policy: str | None = None) -> str:
        """The served name whose replicas to read: ``policy``'s, else the run's first (its only one)."""
        return policy or (self.s.policies[0].name if self.s.policies else self.s.served_model_name)

    def _note_policies(self, status: EnvStatus) -> None:
        """Which policies' trainers have finished and which wait for a batch, as the batcher last said."""
        if status.policies:
            self.finished_policies = {name for name, p in status.policies.items() if p.trainer_done}
            self.waiting_policies = {name for name, p in status.policies.items() if p.trainer_waiting}

    async def weight_version(self, policy: str | None = None) -> int | None:
        """The registry's view of the oldest served version (``common.weight_versions.sampling_version``):
        a group's label only when its response carries no versions, and what /evaluate reports."""
        if self.registry is None:
            return None
        endpoints = (await self.registry.list(model=self.served(policy), ready=True)).endpoints
        return sampling_version(endpoints, self.served(policy))

    async def policy_version(self, policy: str | None = None) -> int:
        """How far the trainer has got (``common.weight_versions.policy_version``). A replica that lags
        (restarted, a failed sync) must not hold every env back: with a staleness bound and a queue
        short of a batch, that stops the trainer and the run."""
        if self.registry is None:
            return 0
        endpoints = (await self.registry.list(model=self.served(policy))).endpoints
        return policy_version(endpoints, self.served(policy))

    def _trial_key(self, trial: str, ttl_seconds: float | None = None) -> str:
        """A key for this trial only, expiring with it (default: one request's worth)."""
        if self.s.trial_key_secret is None:
            return "open"
        from rlstack.common.trial_keys import DEFAULT_TTL_SECONDS, mint

        return mint(self.s.trial_key_secret.get_secret_value(), self.s.run_id, trial,
                    ttl_seconds=ttl_seconds or DEFAULT_TTL_SECONDS)

    async def rollout(self, problem: Any, trial: str) -> dict:
        """One group: n = group_size completions of one problem, scored, as a ScoredData dict."""
        body = {"model": self.s.served_model_name, "n": self.s.group_size, "max_tokens": self.s.max_tokens,
                "temperature": self.s.temperature, "logprobs": True, "return_token_ids": True,
                "messages": self.task.messages(problem)}
        response = await self._complete(trial, body)
        texts = [completion_parts(c)[2] for c in sorted(response["choices"], key=lambda c: c.get("index", 0))]
        scores = [self.task.score(t, problem) for t in texts]
        self.recent_rewards.extend(scores)
        self.metrics.rollouts.labels(self.s.name).inc(len(scores))
        self.metrics.reward_mean.labels(self.s.name).set(sum(self.recent_rewards) / len(self.recent_rewards))
        group = build_group(response, scores)
        if "weight_version" not in group:  # no versions on the choices (a proxy without its relay): the registry's view
            version = await self.weight_version()
            if version is not None:
                group["weight_version"] = version
        group["env_id"] = self.env_id
        return group

    async def _complete(self, trial: str, body: dict) -> dict:
        r = await self.proxy.post(f"/trials/{self.s.run_id}/{trial}/v1/chat/completions", json=body,
                                  headers=bearer(self._trial_key(trial)))
        r.raise_for_status()
        return r.json()

    async def evaluate(self) -> dict:
        """Greedy accuracy on the held-out set, through the proxy like any rollout (trial ``eval``)."""
        version = await self.weight_version()
        limit = asyncio.Semaphore(self.s.workers)

        async def answer(problem: Any) -> bool:
            body = {"model": self.s.served_model_name, "max_tokens": self.s.max_tokens, "temperature": 0.0,
                    "messages": self.task.messages(problem)}
            async with limit:
                response = await self._complete(f"{self.s.name}-eval", body)
            return self.task.score(response["choices"][0]["message"].get("content") or "", problem) >= 1.0

        held = self.task.heldout()
        right = await asyncio.gather(*(answer(p) for p in held))
        return {"accuracy": sum(right) / max(1, len(held)), "problems": len(held), "weight_version": version}

    async def post(self, group: dict) -> None:
        await self.batcher.post_group(group)
        self.metrics.groups_posted.labels(self.s.name).inc()

    async def worker(self, index: int) -> None:
        """Produce groups until cancelled; a batcher that is away is waited for, not fatal."""
        trial = f"{self.s.name}-{index}"
        batcher_away = False
        while True:
            try:
                full = await self.backlog_full()
            except httpx.HTTPError as exc:
                if not batcher_away:  # once per outage, not once per retry
                    log.warning("worker %d: batcher unavailable (%r); retrying every %.0fs", index, exc, BATCHER_RETRY_SECONDS)
                batcher_away = True
                await asyncio.sleep(BATCHER_RETRY_SECONDS)
                continue
            if batcher_away:
                log.info("worker %d: batcher back", index)
                batcher_away = False
            self.holding_back = "backlog" if full else None
            if full:
                await asyncio.sleep(0.5)
                continue
            try:
                await self.post(await self.rollout(next(self.problems), trial))
            except (httpx.HTTPError, BatcherRefused, RuntimeError, ValueError) as exc:  # this group only: the next may pass
                self.metrics.groups_dropped.labels(self.s.name).inc()
                log.warning("group dropped: %s", exc)
                await asyncio.sleep(1.0)

    async def keep_lease(self) -> None:
        """Poll the batcher every ``lease_renew_seconds`` whatever the workers do (agent trials run
        for minutes without a poll): the batcher counts an env silent past its lease as dead."""
        while True:
            await asyncio.sleep(self.s.lease_renew_seconds)
            try:
                self._note_policies(await self.batcher.env_status(self.env_id, self.holding_back))
            except httpx.HTTPError:
                pass  # away: the workers say so, and the next poll renews

    async def run(self) -> None:
        """Register, settle what a predecessor left, wait for the proxy to have a replica
        (``replica_wait``), then run the workers; if one raises, the task group cancels the rest and
        ``run`` raises."""
        await self.register()
        await self.recover()
        async with asyncio.TaskGroup() as workers:
            workers.create_task(self.keep_lease(), name="lease")
            await wait_for_a_replica(self.proxy, policies=self.s.policy_names)
            for i in range(self.s.workers):
                workers.create_task(self.worker(i), name=f"worker {i}")

    async def recover(self) -> None:
        """What a restarted env server settles before new groups: nothing here (a single-turn group is
        cheap to make again); the agent env posts the groups its journal kept."""

    async def aclose(self) -> None:
        if self.env_id is not None:  # a clean stop gives its share back at once, not after its lease
            try:
                await self.batcher.disconnect_env(self.env_id)
            except httpx.HTTPError as exc:
                log.info("could not disconnect env %d (%r): its lease runs out instead", self.env_id, exc)
        for client in (self.batcher, self.proxy, self.registry):
            if client is not None:
                await client.aclose()
