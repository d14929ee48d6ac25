"""The agent env's own Prometheus series, beside the runner's (``EnvMetrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class HarborMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        """The sandbox's own series (a kubernetes sandbox's pool, claims, API calls) go here too."""
        self.trials_started = Counter("rlstack_env_trials_started", "Agent trials started", ["env"], registry=registry)
        self.trials_finished = Counter("rlstack_env_trials_finished", "Agent trials finished, by status",
                                       ["env", "status"], registry=registry)
        self.trial_seconds = Histogram("rlstack_env_trial_seconds", "Wall time of one trial", ["env"], registry=registry,
                                       buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600))
        self.sandboxes_active = Gauge("rlstack_env_sandboxes_active", "Trials running now", ["env"], registry=registry)
        self.thread_breaks = Counter("rlstack_env_thread_breaks", "Calls that did not extend their conversation's "
                                     "tokens and started a new sequence", ["env"], registry=registry)
        self.calls_merged = Counter("rlstack_env_calls_merged", "Calls that extended their thread's sequence",
                                    ["env"], registry=registry)
        self.constant_groups = Counter("rlstack_env_constant_groups", "Groups whose rewards were all equal "
                                       "(no GRPO signal)", ["env"], registry=registry)
        self.sequences_dropped = Counter("rlstack_env_sequences_dropped", "Sequences of a trial other than its main "
                                         "thread (after a thread break, side calls), not posted", ["env"], registry=registry)
        self.staleness_waits = Counter("rlstack_env_staleness_waits", "Groups held back at start because the "
                                       "policy would be too far ahead", ["env"], registry=registry)
        self.trials_abandoned = Counter("rlstack_env_trials_abandoned", "Finished trials of groups a killed env server "
                                        "left unfinished, abandoned at restart (listed with the reason)", ["env"], registry=registry)
        self.groups_recovered = Counter("rlstack_env_groups_recovered", "Groups a killed env server built, posted "
                                        "after its restart under their journaled key", ["env"], registry=registry)
