"""The agent env's loop: per Harbor task, ``group_size`` trials of the agent in sandboxes, their
calls assembled into sequences, one group posted with the trials' rewards. Every sequence of a
trial is posted (its main thread, side calls, sub-agent threads, the segments after a
compaction), each carrying the trial's reward, and the group's ``trials`` says whose row each
is: the group has ``group_size`` members and advantages are taken over members, so a trial
with many segments counts once in the baseline. The trainer registers ``batch_fill:
at_least``, so groups of varying row counts always batch (``--scoring.sequences main`` posts one
row per trial for a trainer that needs Atropos's exact batches).

Registration, batcher back-pressure and posting are the single-turn runner's; what differs is
the rollout. A group is posted only when every trial was scored: a trial that could not be
(infra error, agent crash or timeout, a failed model call) is retried as a new attempt, and if
it still fails the group is dropped and counted, never posted with a made-up reward.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import secrets
import time

import httpx

from rlstack.common.auth import bearer
from rlstack.common.batcher_client import BatcherRefused
from rlstack.common.contracts.atropos import GROUP_NAME_KEY
from rlstack.common.contracts.trajectory import TrajectoryRecord, read_trajectory
from rlstack.envs.config import EnvSettings
from rlstack.envs.harbor_groups import TrialOutcome, trial_group, why_unscored
from rlstack.envs.harbor_metrics import HarborMetrics
from rlstack.envs.harbor_tasks import HarborTasks, NoHeldOutTasks, Upcoming
from rlstack.envs.journal import TrialEntry, TrialJournal, finished_on_disk
from rlstack.envs.runner import BATCHER_RETRY_SECONDS, EnvMetrics, EnvRunner
from rlstack.episodes.agents import (
    SUB_AGENT_MODEL,
    AgentLimits,
    builtin_agent,
    claude_code_agent,
    codex_agent,
    command_agent,
    opencode_agent,
    trial_env,
)
from rlstack.episodes.assemble import assemble
from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.sandboxes import (
    KubernetesSandboxConfig,
    LocalSandboxConfig,
    Sandbox,
    WarmPoolConfig,
    build_sandbox,
)
from rlstack.episodes.trials.layout import TrialPaths
from rlstack.episodes.trials.records import (
    AgentSpec,
    TrialSpec,
    TrialStatus,
)
from rlstack.episodes.trials.run import run_trial, trial_key_ttl, write_result
from rlstack.episodes.trials.verdict import judge_agent_exit

log = logging.getLogger(__name__)
DEFAULT_CONTEXT = 32768
"""Token limit when the served model's own cannot be read (no registry)."""
STALENESS_POLL_SECONDS = 0.5
"""How often the staleness gate reads the policy's version while groups wait at it."""


class GroupDropped(RuntimeError):
    """No group can be posted for this task now; the reason is in the message and the metrics."""


def local_sandbox_config(settings: EnvSettings) -> LocalSandboxConfig:
    fields: dict = {"environment": settings.sandbox.environment, "image_lock": settings.sandbox.image_lock,
                    "build_missing": settings.sandbox.build_images}
    if settings.sandbox.hide_paths is not None:
        fields["hide_paths"] = settings.sandbox.hide_paths
    if settings.sandbox.bundle_dir is not None:
        fields["bundle_dir"] = settings.sandbox.bundle_dir
    return LocalSandboxConfig(**fields)


class HarborEnvRunner(EnvRunner):
    def __init__(self, settings: EnvSettings, metrics: EnvMetrics, agent_metrics: HarborMetrics,
                 sandbox: Sandbox | None = None, tasks: HarborTasks | None = None) -> None:
        if settings.tasks_dir is None:
            raise ValueError("task harbor needs --tasks-dir (a directory of Harbor tasks)")
        tasks = tasks or HarborTasks.load(settings.tasks_dir, settings.seed, settings.heldout_size or 0)
        super().__init__(settings, metrics, task=tasks)
        self.problems = Upcoming(self.problems, settings.workers)
        self.am = agent_metrics
        self._kube = None  # the API client of the kubernetes backend
        self.agent = self._agent_spec()
        self.sandbox = sandbox or self._sandbox()
        self.slots = asyncio.Semaphore(settings.max_concurrent_trials)
        self.groups = itertools.count()
        self.groups_started = 0
        self.instance = secrets.token_hex(3)
        """In every trial id: a restarted env never reuses a trial directory."""
        self.evaluations = itertools.count()
        self.journal = TrialJournal((settings.journal_dir or settings.trials_dir.parent / "env-journal").resolve(),
                                    f"{settings.run_id}-{settings.name}", self.instance)
        self._journaled: dict[int, tuple[str, str]] = {}
        """id(group body) -> (group, Idempotency-Key), from its ``ready`` entry to its post."""
        self._limit: int | None = None
        self._version_reads: dict[str | None, tuple[asyncio.Future[int], float]] = {}
        """Each policy's (None: the only one's) last version read and when it started."""

    def _agent_spec(self) -> AgentSpec:
        on_host = self.s.sandbox.backend == "local"  # in pods a trial runs the agent bundle's binary, never the host's
        if self.s.agent.name == "claude-code":
            if self.s.agent.sub_agent_policy is not None:  # the worker on its own policy, by claude-code's own means
                return claude_code_agent(self.s.agent.claude_code_bin, subagents=True, sub_agent_model="haiku", on_host=on_host)
            return claude_code_agent(self.s.agent.claude_code_bin, on_host=on_host)
        if self.s.agent.name == "codex":
            return codex_agent(self.s.agent.codex_bin, on_host=on_host)
        if self.s.agent.name == "opencode":
            return opencode_agent(self.s.agent.opencode_bin, on_host=on_host)
        if self.s.agent.name == "command" and self.s.agent.command is not None:
            return command_agent(self.s.agent.command)
        return builtin_agent(AgentLimits(max_turns=self.s.agent.max_turns, max_tokens=self.s.max_tokens,
                                         temperature=self.s.temperature))

    def _sandbox(self) -> Sandbox:
        if self.s.sandbox.backend == "kubernetes":
            if not self.s.sandbox.claim:
                raise ValueError("sandbox.backend kubernetes needs sandbox.claim (--sandbox.claim)")
            config = KubernetesSandboxConfig(
                environment=self.s.sandbox.environment, image=self.s.sandbox.image, bundle_image=self.s.sandbox.bundle_image,
                bundle_source=self.s.sandbox.bundle_source, image_lock=self.s.sandbox.image_lock,
                image_pull_policy=self.s.sandbox.image_pull_policy, claim_name=self.s.sandbox.claim,
                trials_dir=self.s.trials_dir.resolve(), trials_subpath=self.s.sandbox.trials_subpath, python=self.s.sandbox.python,
                pool=WarmPoolConfig(max_total=self.s.sandbox.pool_max_total, max_per_image=self.s.sandbox.pool_max_per_image,
                                    idle_seconds=self.s.sandbox.pool_idle_seconds))
            from rlstack.envs.cluster import sandbox_manager

            self._kube, manager = sandbox_manager(self.s)
            sandbox = build_sandbox(config, manager, self.am.registry)
        else:
            sandbox = build_sandbox(local_sandbox_config(self.s))
        sandbox.check()
        return sandbox

    async def run(self) -> None:
        """Every task's image first (built or read from the lock file, probed), before this env takes
        a share of the batcher: a task that cannot have one stops the start, named with its fix."""
        prepare = getattr(self.sandbox, "prepare", None)
        if prepare is not None:
            tasks = [*self.task.training, *self.task.heldout()]
            failed = await asyncio.to_thread(prepare, tasks, self.agent.image_command or self.agent.command)
            if failed:
                raise RuntimeError(f"{len(failed)} of {len(tasks)} tasks have no image a trial can run in:\n"
                                   + "\n".join(f"  {why}" for why in failed.values()))
        await super().run()

    async def token_limit(self) -> int:
        """The served model's context: an agent trial's one sequence can be that long."""
        if self.s.max_token_length:
            return self.s.max_token_length
        if self._limit is None:
            self._limit = await self._served_context() or DEFAULT_CONTEXT
        return self._limit

    async def _served_context(self) -> int | None:
        """The replicas' ``max_model_len`` label in the registry (their sidecars read it from vLLM), the
        shortest over every policy's replicas. Never vLLM itself: its port is closed to env pods, since it
        also serves the dev routes."""
        if self.registry is None:
            return None
        lengths = []
        for policy in self.s.policy_names or [None]:
            try:
                endpoints = (await self.registry.list(model=self.served(policy))).endpoints
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("could not read the served model's context length from the registry: %r", exc)
                return None
            lengths += [int(e.labels["max_model_len"]) for e in endpoints if e.labels.get("max_model_len", "").isdigit()]
        return min(lengths, default=None)  # a sequence must fit every replica that may serve it

    async def rollout(self, problem: HarborTask, trial: str) -> dict | list[dict]:
        expect = getattr(self.sandbox, "expect", None)
        if expect is not None:  # the warm pool keeps pods for this group and the ones that start next
            try:
                await expect([problem, *self.problems.peek()], self.s.group_size)
            except Exception as exc:  # a pool is a speed-up: its trials start cold without it, never a lost group
                log.warning("the sandbox's warm pool could not be told the next groups: %r", exc)
        await self._wait_for_staleness_room()
        number = next(self.groups)
        self.groups_started += 1
        group_id = f"{trial}-{self.instance}-g{number}"
        try:
            outcomes = await asyncio.gather(*(self._journaled_trial(problem, group_id, f"{group_id}-t{i}")
                                              for i in range(self.s.group_size)))
            group = self._group(problem, outcomes)
            for part in group if isinstance(group, list) else [group]:
                part["group_overrides"] = {GROUP_NAME_KEY: group_id}  # the trainer's step records name it
            key = self.journal.new_key()
            self.journal.ready(group_id, key, group)
            self._journaled[id(group)] = (group_id, key)
            return group
        except BaseException as exc:
            self.groups_started -= 1  # a dropped group never reaches the trainer
            if not isinstance(exc, asyncio.CancelledError):  # a stop leaves it to the next start's recovery
                self.journal.dropped(group_id, f"group dropped: {exc}"[:500])
            raise

    async def _wait_for_staleness_room(self) -> None:
        """AReaL's rule: start group g only while g < (version + max_staleness + 1) * groups per batch,
        with the trainer's version (the newest a replica holds), never a lagging replica's. With several
        policies, for every policy still training, by its own trainer's version and batch: a trial may call
        any of them, so each group started counts against each (a bound from above; docs/policies.md)."""
        if self.s.max_staleness is None:
            return
        waited = False
        while True:
            if await self._staleness_room():
                if waited:
                    self.holding_back = None
                return
            if not waited:
                self.am.staleness_waits.labels(self.s.name).inc()
                waited = True
                self.holding_back = "staleness"  # the batcher names it if the trainer starves
            await asyncio.sleep(STALENESS_POLL_SECONDS)

    async def _staleness_room(self) -> bool:
        """With several policies a policy whose trainer waits for a batch is exempt from its bound: its
        groups per batch are counted from a full group's rows, and a policy in fewer than every trial
        fills a batch from more groups than that (the first team run stopped here: both trainers
        waiting, the env holding back on the helper's bound)."""
        for policy in [p for p in self.s.policy_names if p not in self.finished_policies] or [None]:
            if policy in self.waiting_policies:
                continue
            bound = (await self._shared_policy_version(policy) + self.s.max_staleness + 1) * self._groups_per_batch(policy)
            if self.groups_started >= bound:
                return False
        return True

    def _groups_per_batch(self, policy: str | None) -> int:
        batch = self.batch_sizes.get(policy) if policy is not None else None
        return math.ceil((batch or self.batch_size or self.s.group_size) / self.s.group_size)

    async def _shared_policy_version(self, policy: str | None = None) -> int:
        """``policy_version``, read at most once per ``STALENESS_POLL_SECONDS`` (per policy) for every
        group at the gate.

        Each waiting worker used to read the registry itself every 0.5 s: 1,000 trials in groups of 8
        (125 workers) sent it 250 lists a second for as long as they waited (bench/env_scale.py), and
        any one of them failing counted a group as dropped. A version up to that old only makes the gate
        stricter: versions only grow."""
        loop = asyncio.get_running_loop()
        read, read_at = self._version_reads.get(policy, (None, 0.0))
        if read is None or (read.done() and loop.time() - read_at >= STALENESS_POLL_SECONDS):
            read = asyncio.ensure_future(self.policy_version() if policy is None else self.policy_version(policy))
            self._version_reads[policy] = (read, loop.time())
        return await asyncio.shield(read)  # a waiter cancelled (a stop) does not cancel the others' read

    async def _journaled_trial(self, task: HarborTask, group: str, trial: str) -> TrialOutcome:
        """A scored trial counts as finished once the journal holds it."""
        outcome = await self._scored_trial(task, trial)
        self.journal.trial(TrialEntry(group=group, trial=outcome.result.trial, task=task.short_name,
                                      status=outcome.result.status.value, reward=outcome.result.reward,
                                      trial_dir=str(TrialPaths.of(self.s.trials_dir, self.s.run_id, outcome.result.trial).root)))
        return outcome

    async def post(self, group: dict | list[dict]) -> None:
        """Post under the key journaled with the group; a batcher that is away is waited for, since the
        group's trials are done and cannot be run again for nothing; a refusal settles it."""
        group_id, key = self._journaled.pop(id(group), (None, None))
        while True:
            try:
                await self.batcher.post_groups(group, key=key)
                break
            except BatcherRefused as exc:  # settled: its trials are listed as abandoned with the refusal
                if group_id is not None:
                    self.journal.dropped(group_id, f"refused by the batcher: {exc}"[:500])
                raise
            except httpx.HTTPError as exc:  # away or failing
                log.warning("group %s: batcher unavailable (%r); posting again in %.0fs", group_id, exc, BATCHER_RETRY_SECONDS)
                await asyncio.sleep(BATCHER_RETRY_SECONDS)
        self.metrics.groups_posted.labels(self.s.name).inc()
        if group_id is not None:
            self.journal.posted(group_id)

    async def recover(self) -> None:
        """Take over the journals of killed predecessors (same run and name, lock free): post the groups
        they built but may not have posted (same keys: none lands twice); their unfinished groups'
        trials are abandoned, each recorded with why."""
        if not self.journal.hold():
            raise RuntimeError(f"{self.journal.path} is held by a live process")
        for orphan in self.journal.orphans():
            pending = orphan.pending(finished_on_disk(self.s.trials_dir, self.s.run_id, orphan.instance or "*"))
            if pending.abandoned:
                self.am.trials_abandoned.labels(self.s.name).inc(len(pending.abandoned))
                log.warning("%s: %d finished trial(s) of unfinished groups abandoned (listed in %s)", orphan.path.name,
                            len(pending.abandoned), orphan.abandoned_path)
            for entry in pending.to_post:
                # The body as journaled, its env id too (the batcher keeps every env's slot): the batcher
                # knows a key by the body's digest, so only the same bytes find the group it already took.
                try:  # a batcher that is away fails the start: the restarted server takes the journal over again
                    await self.batcher.post_groups(entry.body, key=entry.key)
                except BatcherRefused as exc:
                    log.warning("group %s of %s refused after the restart, dropped: %s", entry.group, orphan.path.name, exc)
                    self.metrics.groups_dropped.labels(self.s.name).inc()
                    orphan.dropped(entry.group, f"refused by the batcher after a restart: {exc}"[:500])
                else:
                    self.am.groups_recovered.labels(self.s.name).inc()
                    self.metrics.groups_posted.labels(self.s.name).inc()
                    log.info("group %s of %s posted after the restart (key %s)", entry.group, orphan.path.name, entry.key)
                    orphan.posted(entry.group)
            orphan.remove()

    async def _scored_trial(self, task: HarborTask, trial: str) -> TrialOutcome:
        outcome = None
        for attempt in range(1, self.s.scoring.retries + 2):
            outcome = await self._trial(task, trial if attempt == 1 else f"{trial}-a{attempt}", attempt)
            if outcome.scored:
                return outcome
            log.info("trial %s attempt %d not scorable: %s (%s)", trial, attempt, outcome.result.status,
                     outcome.result.error or why_unscored(outcome))
        assert outcome is not None
        raise GroupDropped(f"task {task.short_name}: trial {trial} could not be scored after {attempt} attempt(s): "
                           f"{outcome.result.status} {outcome.result.error or why_unscored(outcome)}")

    def key_ttl(self, task: HarborTask) -> float:
        """A trial key's lifetime: minted before its sandbox starts, so the sandbox's start counts too."""
        return trial_key_ttl(task, self.s.agent.timeout_seconds, getattr(self.sandbox, "start_allowance_seconds", 0.0))

    async def _trial(self, task: HarborTask, trial: str, attempt: int, agent: AgentSpec | None = None) -> TrialOutcome:
        agent = agent or self.agent
        async with self.slots:  # the key is minted once the trial can start: it lives as long as the trial
            key = self._trial_key(trial, self.key_ttl(task))
            env = trial_env(agent, str(self.s.proxy_url), self.s.run_id, trial, key, self.s.served_model_name,
                            haiku_model=SUB_AGENT_MODEL if self.s.agent.sub_agent_policy is not None else None)
            spec = TrialSpec(run=self.s.run_id, trial=trial, attempt=attempt, task=task, agent=agent, env=env,
                             agent_timeout_sec=self.s.agent.timeout_seconds, private_paths=[self.task.dataset.root, self.journal.directory])
            self.am.trials_started.labels(self.s.name).inc()
            self.am.sandboxes_active.labels(self.s.name).inc()
            started = time.monotonic()
            try:
                result = await run_trial(spec, self.sandbox, self.s.trials_dir)
            finally:
                self.am.sandboxes_active.labels(self.s.name).dec()
        self.am.trials_finished.labels(self.s.name, result.status.value).inc()
        self.am.trial_seconds.labels(self.s.name).observe(time.monotonic() - started)
        paths = TrialPaths.of(self.s.trials_dir, self.s.run_id, trial)
        records = await self._records(paths)
        result = judge_agent_exit(result, records)  # an agent's own crash is scored unless calls failed
        assembly = assemble(records) if records else None
        if assembly is not None:
            self.am.thread_breaks.labels(self.s.name).inc(assembly.thread_breaks)
            self.am.calls_merged.labels(self.s.name).inc(assembly.merged_calls)
            result.trajectory = assembly.stats()
            await asyncio.to_thread(write_result, paths, result)
            await asyncio.to_thread(self._export_atif, paths, agent.name)
        limit = await self.token_limit()
        if self.trainer_token_limit:
            limit = min(limit, self.trainer_token_limit)
        return TrialOutcome(result, assembly, limit)

    def _export_atif(self, paths: TrialPaths, agent: str) -> None:
        from rlstack.episodes.trials.atif import write_atif

        try:
            write_atif(paths.root, agent)
        except Exception:  # an export is a convenience: never lose a scored trial over it
            log.exception("ATIF export of %s failed", paths.root)

    async def _records(self, paths: TrialPaths) -> list[TrajectoryRecord]:
        """Tell the proxy the trial is over and take the calls it logged (a signal, not a settle delay).

        If the proxy cannot be asked (an older proxy, or it is restarting), the files are read as
        they are, with a warning: every call already answered is on disk or within ms of it."""
        from rlstack.common.contracts.trial_end import TrialEnd, end_token

        secret = self.s.trial_key_secret.get_secret_value() if self.s.trial_key_secret else None
        try:  # the runner's own keep-alive client to the proxy, not a new connection per trial
            reply = await self.proxy.post(f"/trials/{self.s.run_id}/{paths.root.name}/end", timeout=60,
                                          headers=bearer(end_token(secret, self.s.run_id, paths.root.name)))
            reply.raise_for_status()
            ended = TrialEnd.model_validate_json(reply.content)
            if ended.in_flight:
                log.warning("trial %s: the proxy was still logging %d call(s) at its end", paths.root.name, ended.in_flight)
            if ended.unreached:
                log.warning("trial %s: proxy pods %s did not take its end; calls they served may be missing",
                            paths.root.name, ", ".join(ended.unreached))
            return ended.records
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("trial %s: the proxy did not answer its end (%r); reading its files as they are", paths.root.name, exc)
            return await asyncio.to_thread(read_trajectory, paths.root)

    async def one_trial(self, task: HarborTask, trial: str, agent: AgentSpec | None = None) -> TrialOutcome:
        """One trial outside any group (``rlstack trial``): run, its logged calls, assembly, result.json."""
        return await self._trial(task, trial, 1, agent)

    def eval_agent(self) -> AgentSpec:
        """The built-in agent at ``eval_temperature``; any other agent as it trains."""
        if self.agent.name != "builtin":
            return self.agent
        return builtin_agent(AgentLimits(max_turns=self.s.agent.max_turns, max_tokens=self.s.max_tokens,
                                         temperature=self.s.scoring.eval_temperature))

    async def evaluate(self) -> dict:
        """Pass rate on the held-out tasks: ``eval_samples`` trials each (the built-in agent at
        ``eval_temperature``, any other agent as configured). A trial passes when it ends ``ok``
        with reward 1; one that does not finish does not pass, and ``statuses`` says how each ended."""
        held = self.task.heldout()
        if not held:
            raise NoHeldOutTasks("no held-out tasks: start the env with --heldout-size N to keep N tasks for evaluation")
        version = await self.weight_version()
        agent = self.eval_agent()
        number = next(self.evaluations)
        runs = [task for task in held for _ in range(self.s.scoring.eval_samples)]
        outcomes = await asyncio.gather(*(self._trial(task, f"{self.s.name}-eval-{self.instance}-e{number}-t{i}", 1, agent)
                                          for i, task in enumerate(runs)))
        rewards = [o.result.reward for o in outcomes if o.result.status == TrialStatus.OK and o.result.reward is not None]
        passed = sum(r >= 1.0 for r in rewards)
        statuses = collections.Counter(o.result.status.value for o in outcomes)
        log.info("evaluation %d: %d of %d held-out trials passed (%d tasks; %s)", number, passed, len(runs), len(held),
                 dict(statuses))
        return {"accuracy": passed / len(runs), "problems": len(held), "trials": len(runs), "weight_version": version,
                "reward_mean": sum(rewards) / len(rewards) if rewards else None, "statuses": dict(statuses)}

    def _group(self, task: HarborTask, outcomes: list[TrialOutcome]) -> dict | list[dict]:
        rewards = [o.result.reward for o in outcomes]
        self.recent_rewards.extend(r for r in rewards if r is not None)
        self.metrics.rollouts.labels(self.s.name).inc(len(outcomes))
        if self.recent_rewards:
            self.metrics.reward_mean.labels(self.s.name).set(sum(self.recent_rewards) / len(self.recent_rewards))
        if len(set(rewards)) == 1:
            self.am.constant_groups.labels(self.s.name).inc()
            if self.s.scoring.drop_constant_groups:
                raise GroupDropped(f"task {task.short_name}: every trial scored {rewards[0]} (no signal)")
        every = self.s.scoring.sequences == "all" and self.batch_fill == "at_least"  # an exact trainer could stall
        if not self.s.policy_names:
            group, left_out = trial_group(outcomes, every, self.env_id)
            if left_out:
                self.am.sequences_dropped.labels(self.s.name).inc(left_out)
            return group
        return self._policy_groups(task, outcomes, every)

    def _policy_groups(self, task: HarborTask, outcomes: list[TrialOutcome], every: bool) -> list[dict]:
        """One group per policy that took part in at least two trials (one trial's rows alone carry no
        advantage), each of that policy's sequences only, tagged for its queue; posted together."""
        groups = []
        for policy in self.s.policy_names:
            group, left_out = trial_group(outcomes, every, self.env_id, policy=policy)
            if left_out:
                self.am.sequences_dropped.labels(self.s.name).inc(left_out)
            members = len(set(group["trials"])) if "trials" in group else len(group["tokens"])
            if members < 2:
                log.info("task %s: policy %s took part in %d trial(s) of the group: no group of its own", task.short_name,
                         policy, members)
                continue
            if self.s.scoring.drop_constant_groups and len(set(group["scores"])) == 1:
                continue
            group["policy"] = policy
            groups.append(group)
        if not groups:
            raise GroupDropped(f"task {task.short_name}: no policy has a group of two trials or more with a signal")
        return groups

    async def aclose(self) -> None:
        await self.sandbox.close()
        if self._kube is not None:
            await self._kube.close()
        await super().aclose()

