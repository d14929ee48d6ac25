"""Env server settings (env prefix ``RLSTACK_ENV_``, or the same fields as flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, HttpUrl, SecretStr, ValidationError, model_validator
from pydantic_settings import SettingsConfigDict

from rlstack.common.names import ID_PATTERN
from rlstack.common.policies import PolicyRoute, PolicyTable
from rlstack.common.settings import PolicySettings
from rlstack.envs.tasks import TaskContext, plugin
from rlstack.episodes.agents import SUB_AGENT_MODEL

AgentName = Literal["builtin", "claude-code", "codex", "opencode", "command"]


class HarborSpec(BaseModel):
    """Agent trials on a Harbor dataset."""

    kind: Literal["harbor"] = "harbor"
    tasks_dir: Path
    agent: AgentName
    agent_command: str | None = None
    sandbox: Literal["local", "kubernetes"]


class TrialAgentSettings(BaseModel):
    """harbor: who works on the tasks, and how long."""

    name: AgentName = "builtin"
    """``command`` runs ``command`` (set by giving it)."""
    command: str | None = None
    """Any agent, as a shell-style command line run in /app, e.g. ``mini -y -t {instruction}``.
    A word equal to ``{instruction}`` becomes the task's instruction; the agent finds the proxy in
    OPENAI_BASE_URL / ANTHROPIC_BASE_URL and its key in OPENAI_API_KEY / ANTHROPIC_API_KEY."""
    max_turns: int = Field(default=8, ge=1)
    """Built-in agent: model calls per trial at most."""
    timeout_seconds: float | None = Field(default=None, gt=0)
    """Overrides each task's ``[agent].timeout_sec``."""
    claude_code_bin: Path = Path(".cache/claude-code/node_modules/.bin/claude")
    codex_bin: Path = Path(".cache/codex/node_modules/.bin/codex")
    opencode_bin: Path = Path(".cache/opencode/node_modules/.bin/opencode")
    sub_agent_policy: str | None = None
    """claude-code: its sub-agent (the ``worker`` preset, ``model: haiku``) runs on this policy, one
    of ``policies`` claiming ``claude-haiku-4-5``; the lead stays on ``claude-sonnet-4-5``."""

    @model_validator(mode="after")
    def _command_is_the_agent(self) -> TrialAgentSettings:
        """Giving a command line picks the ``command`` agent; one that cannot be split fails here, not at the first trial."""
        if self.command is not None:
            from rlstack.episodes.agents import agent_argv

            agent_argv(self.command)
            if "name" in self.model_fields_set and self.name != "command":
                raise ValueError(f"agent.command: runs instead of agent {self.name!r}; leave agent.name unset (or 'command')")
            given = "name" in self.model_fields_set
            self.name = "command"
            if not given:  # derived, not given: an error naming what was set names the command only
                self.model_fields_set.discard("name")
        elif self.name == "command":
            raise ValueError("agent.command: agent.name command needs the command line (--agent.command '...')")
        return self


class ScoringSettings(BaseModel):
    """How trials become scored groups, in training and held out."""

    retries: int = Field(default=1, ge=0, le=10)
    """harbor: new attempts for a trial that could not be scored (infra error, failed model call)."""
    sequences: Literal["all", "main"] = "all"
    """harbor: ``all`` posts every sequence of a trial (main thread, side calls, sub-agents, the segments
    after a compaction), each with the trial's reward and the group's ``trials`` naming whose row it is;
    ``main`` posts only each trial's main thread (one row per trial), for a trainer that needs Atropos's
    exact batches of ``group_size`` rows per group."""
    eval_temperature: float = Field(default=0.0, ge=0)
    """harbor, built-in agent: sampling temperature of POST /evaluate's trials (0: greedy; the
    training ``temperature`` measures the policy as it samples)."""
    eval_samples: int = Field(default=1, ge=1, le=64)
    """harbor: trials per held-out task in POST /evaluate; the pass rate is over all of them."""
    drop_constant_groups: bool = False
    """Do not post groups whose rewards are all equal (no GRPO signal); they are counted either way."""


class SandboxSettings(BaseModel):
    """harbor: where and in what a trial runs, and how its sandboxes are kept and cleaned up."""

    backend: Literal["local", "kubernetes"] = "local"
    """``local``: bubblewrap on this host; ``kubernetes``: a pod per trial."""
    environment: Literal["image", "host"] = "image"
    """``image`` runs each trial in its task's image (local: the lock file's, or built here before the
    first trial; kubernetes: the lock file's, by digest once pushed); ``host``: local, on this host's
    tools (warned per run); kubernetes, every phase in ``image``. For tasks that need no image."""
    image: str | None = None
    """kubernetes, environment host: the image every trial phase runs in (bash, python3 with rlstack, the agent)."""
    bundle_image: str | None = None
    """kubernetes, environment image: the agent bundle's image, copied into each trial pod by an init container."""
    bundle_source: Literal["copy", "volume"] = "copy"
    """kubernetes: ``copy`` (an init container, any cluster) or ``volume`` (an image volume: Kubernetes' ImageVolume feature)."""
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    """kubernetes: of the task images and the bundle image."""
    claim: str | None = None
    """kubernetes: the RWX claim that holds ``trials_dir`` (mounted here and in every trial pod)."""
    trials_subpath: str = "trials"
    """kubernetes: ``trials_dir``'s path inside that claim."""
    python: str = "python"
    """kubernetes: the Python (with rlstack) inside ``image``."""
    image_lock: Path | None = None
    """The lock file ``rlstack tasks build`` wrote; unset: the dataset's ``images.lock.json`` if any."""
    build_images: bool = True
    """local: build the images the lock file lacks (podman) before the first trial."""
    bundle_dir: Path | None = None
    """local: the agent bundle mounted at /opt/rlstack in task images; unset: the checkout's .cache/agent-bundle."""
    hide_paths: list[Path] | None = None
    """local: host paths the sandbox covers with an empty tmpfs; unset: home directories, the checkout's
    runs/ and data/, the example tasks' tests and solutions (the dataset and the run's trials always)."""
    reaper: bool = False
    """In a cluster: delete this server's sandbox pods once finished for a grace period, or past the TTL."""
    ttl_seconds: float = Field(default=7200.0, gt=0)
    grace_seconds: float = Field(default=300.0, ge=0)
    """Finished sandboxes stay this long so their logs can be read."""
    reap_interval_seconds: float = Field(default=30.0, gt=0)
    pool_max_total: int = Field(default=0, ge=0)
    """kubernetes, image: warm pods at most over every task image, started ahead for the next groups'
    tasks and claimed by their trials; 0: every trial creates its pod (docs/kubernetes.md#warm-pools)."""
    pool_max_per_image: int = Field(default=8, ge=1)
    pool_idle_seconds: float = Field(default=600.0, gt=60)
    """A warm pod nobody claims leaves after this long."""


class KubeSettings(BaseModel):
    """The Kubernetes API this server's sandbox pods live in, and the pod that owns them."""

    api_url: str | None = None
    """API server to use instead of the in-cluster or kubeconfig one (``kubectl proxy``, tests)."""
    namespace: str | None = None
    """Where sandboxes live; unset = this pod's own namespace."""
    pod_name: str | None = None
    """This server's pod (downward API): owner of its sandboxes, which then die with it."""
    pod_uid: str | None = None


ENV_RENAMED = {
    "agent": "agent.name", "agent_command": "agent.command", "agent_max_turns": "agent.max_turns",
    "agent_timeout_seconds": "agent.timeout_seconds", "claude_code_bin": "agent.claude_code_bin",
    "codex_bin": "agent.codex_bin", "opencode_bin": "agent.opencode_bin", "sub_agent_policy": "agent.sub_agent_policy",
    "trial_retries": "scoring.retries", "trial_sequences": "scoring.sequences", "eval_temperature": "scoring.eval_temperature",
    "eval_samples": "scoring.eval_samples", "drop_constant_groups": "scoring.drop_constant_groups",
    "sandbox": "sandbox.backend", **{f"sandbox_{f}": f"sandbox.{f}" for f in SandboxSettings.model_fields if f != "backend"},
    "kube_api_url": "kube.api_url", "kube_namespace": "kube.namespace", "pod_name": "kube.pod_name", "pod_uid": "kube.pod_uid",
}
"""The env server's flat settings before they were grouped, and where each lives now."""

TASK_FIELDS: dict[str, frozenset[str]] = {
    "harbor": frozenset({"tasks_dir", "agent", "policies", "scoring.retries", "scoring.sequences", "scoring.eval_temperature",
                         "scoring.eval_samples"}),
}
"""Settings (a group's, or one field of a group) that mean something for one task only; setting one for
another task is a mistake worth an error. (The sandbox and kube groups are shared infrastructure: the
chart sets them for every env server.) Single-turn tasks keep theirs in ``task_options``, checked by the
task's own model."""


class EnvSettings(PolicySettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_ENV_", cli_prog_name="rlstack.envs")
    renamed: ClassVar[dict[str, str]] = ENV_RENAMED

    port: int = Field(default=8300, ge=0, le=65535)
    task: str = "arithmetic"
    """Which task this server runs: a registered single-turn task (``arithmetic``, ``gsm8k``, or one a
    module registers, see ``rlstack.envs.tasks``), or ``harbor`` for agent trials on ``tasks_dir``."""
    task_options: dict[str, Any] = Field(default_factory=dict)
    """A single-turn task's own settings, checked by its options model, e.g. ``{"difficulty": 2}``
    for arithmetic or ``{"dataset_path": "gsm8k.jsonl"}`` for gsm8k (a JSON object as flag or env var)."""
    name: str = "arithmetic"
    """Name registered with the batcher (Atropos' desired_name)."""
    batcher_url: HttpUrl = HttpUrl("http://127.0.0.1:8000")
    batcher_token: SecretStr | None = None
    proxy_url: HttpUrl = HttpUrl("http://127.0.0.1:4000")
    trial_key_secret: SecretStr | None = None
    """Secret shared with the proxy to mint this env's trial key; open proxies need none."""
    registry_url: HttpUrl | None = None
    """Read to stamp groups with the oldest weight version being served."""
    run_id: str = Field(default="local", pattern=ID_PATTERN)
    group_size: int = Field(default=8, ge=1, le=256)
    max_tokens: int = Field(default=16, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    workers: int = Field(default=4, ge=1, le=256)
    """Rollouts in flight at once."""
    max_token_length: int | None = Field(default=None, ge=16)
    """Longest sequence this env posts (registered with the batcher). Unset: 2048 for single-turn
    tasks; for ``harbor`` the served model's context (vLLM's ``max_model_len``), since one
    agent trial can fill it."""
    max_batches_offpolicy: int = Field(default=2, ge=1)
    """Pause producing once this many batches wait in the batcher (status-driven throttling), and
    never while the trainer waits for one."""
    lease_renew_seconds: float = Field(default=5.0, gt=0, le=300)
    """How often the env polls the batcher even while every worker is busy: a poll renews its lease
    (the batcher's ``env_lease_seconds``, 30 by default, must be several of these)."""
    seed: int = 0
    heldout_size: int | None = Field(default=None, ge=0)
    """Problems (harbor: tasks of the dataset) kept out of training and answered by POST /evaluate.
    Unset: 64 for single-turn tasks, 0 for ``harbor`` (a dataset is small; say how many to hold out)."""
    tasks_dir: Path | None = None
    """harbor: a Harbor dataset (a directory of task directories)."""
    policies: tuple[PolicyRoute, ...] = ()
    """harbor, a run training several policies (JSON, as the proxy's ``policies``): each trial group
    becomes one group per policy that took part, of that policy's sequences, posted together to the
    batcher's per-policy queues. Unset: one policy, every sequence in one group, as always."""
    journal_dir: Path | None = None
    """harbor: where the trial journal lives (finished trials and groups not yet posted, kept over a
    kill); unset: ``env-journal`` beside ``trials_dir``. On the env's volume in a cluster."""
    trials_dir: Path = Path("trials")
    """harbor: the proxy's ``--trials-dir`` (shared): trial records and the proxy's JSONL meet here."""
    max_concurrent_trials: int = Field(default=4, ge=1, le=4096)
    """harbor: trials running at once over all groups."""
    max_staleness: int | None = Field(default=None, ge=0)
    """harbor: start a group only while the served policy is at most this many versions behind the
    number of batches already started (bounds staleness at trial start, not at batch time)."""
    agent: TrialAgentSettings = TrialAgentSettings()
    scoring: ScoringSettings = ScoringSettings()
    sandbox: SandboxSettings = SandboxSettings()
    kube: KubeSettings = KubeSettings()

    @model_validator(mode="after")
    def _fields_fit_the_task(self) -> EnvSettings:
        """The settings of one task given to a server of another are named, at start-up."""
        for kind, fields in TASK_FIELDS.items():
            stray = sorted(p for p in self._paths_set() if p in fields or p.partition(".")[0] in fields) if kind != self.task else []
            if stray:
                raise ValueError(f"{', '.join(stray)}: only for task {kind!r}, but task is {self.task!r}")
        if self.task == "harbor" and self.tasks_dir is None:
            raise ValueError("tasks_dir: task 'harbor' needs a Harbor dataset directory (--tasks-dir)")
        if self.task == "harbor" and self.task_options:
            raise ValueError("task_options: task 'harbor' is set by its own fields (--tasks-dir, --agent.name, ...), not task_options")
        if self.task != "harbor":
            self._single_turn_options()
        if self.heldout_size is None:
            self.heldout_size = 0 if self.task == "harbor" else 64
        self._check_policies()
        return self

    def _paths_set(self) -> set[str]:
        """Fields given (not defaulted), a group's as ``group.field`` (TASK_FIELDS names a group or one field of it)."""
        paths = set(self.model_fields_set)
        for group in ("agent", "scoring", "sandbox", "kube"):
            if given := {f"{group}.{f}" for f in getattr(self, group).model_fields_set}:
                paths = (paths - {group}) | given
        return paths

    def _check_policies(self) -> None:
        """Two policies claiming one name, a sub-agent policy that is not one of them or answers no
        haiku name: an error before the first trial, naming the field."""
        table = PolicyTable(self.policies) if self.policies else None  # overlapping claims are refused here
        sub = self.agent.sub_agent_policy
        if sub is None:
            return
        names = [p.name for p in self.policies]
        if self.agent.name != "claude-code":
            raise ValueError(f"agent.sub_agent_policy: only for agent 'claude-code' (its sub-agents), not {self.agent.name!r}")
        if sub not in names:
            raise ValueError(f"agent.sub_agent_policy: {sub!r} is not one of policies {names}")
        if table is None or table.route(SUB_AGENT_MODEL, "messages") != sub:
            raise ValueError(f"agent.sub_agent_policy: {sub!r} does not answer {SUB_AGENT_MODEL!r}, the name "
                             "claude-code's haiku sub-agent asks for; give it a served name such as 'claude-haiku-*'")

    @property
    def policy_names(self) -> list[str]:
        """The policies a trial's groups are split by; empty with one (nothing is split)."""
        return [p.name for p in self.policies] if len(self.policies) > 1 else []

    def _single_turn_options(self) -> BaseModel:
        """The task's options as its own model; an unknown task or a bad field is named here, at start-up."""
        try:
            options_model = plugin(self.task).options
        except ValueError as exc:
            raise ValueError(f"task: {exc}") from None
        try:
            return options_model.model_validate(self.task_options)
        except ValidationError as exc:
            problems = "; ".join(f"task_options.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"{problems} (task {self.task!r})") from None

    @property
    def task_spec(self) -> BaseModel:
        """The task as one typed value: ``HarborSpec`` for agent trials, else the task's own options model."""
        if self.task == "harbor":
            assert self.tasks_dir is not None  # a harbor server without one is refused at start-up
            return HarborSpec(tasks_dir=self.tasks_dir, agent=self.agent.name, agent_command=self.agent.command,
                              sandbox=self.sandbox.backend)
        return self._single_turn_options()

    @property
    def task_context(self) -> TaskContext:
        return TaskContext(seed=self.seed, heldout_size=self.heldout_size or 0)
