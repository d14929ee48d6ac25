"""Where a trial's records live: ``<trials>/<run>/<trial>/``, shared with the proxy's logger.

::

    litellm-trajectory.<writer>.jsonl   every model call of the trial (one file per proxy process)
    agent/                     instruction.md, stdout.txt, stderr.txt, exit_code.txt (+ the agent's own logs)
    verifier/                  test-stdout.txt, reward.txt or reward.json
    result.json                the TrialResult
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class TrialPaths(BaseModel):
    model_config = ConfigDict(frozen=True)

    root: Path

    @classmethod
    def of(cls, trials_dir: Path, run: str, trial: str) -> TrialPaths:
        return cls(root=Path(trials_dir) / run / trial)

    @property
    def agent_dir(self) -> Path:
        return self.root / "agent"

    @property
    def verifier_dir(self) -> Path:
        return self.root / "verifier"

    @property
    def instruction(self) -> Path:
        return self.agent_dir / "instruction.md"

    @property
    def result(self) -> Path:
        return self.root / "result.json"

