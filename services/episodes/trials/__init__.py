"""Trials: one agent on one task in one sandbox, its verifier's reward, and the records it leaves."""

from rlstack.episodes.trials.layout import TrialPaths
from rlstack.episodes.trials.records import AgentSpec, TrialResult, TrialSpec, TrialStatus
from rlstack.episodes.trials.run import TrialExists, run_trial

__all__ = ["AgentSpec", "TrialExists", "TrialPaths", "TrialResult", "TrialSpec", "TrialStatus", "run_trial"]
