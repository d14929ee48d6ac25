"""Reading what a verifier wrote: ``reward.json`` (preferred, as in Harbor) or ``reward.txt``.

``reward.txt`` holds one number; ``reward.json`` a number or an object of named numbers, whose
``reward`` key (or only key) is the trial's reward. Anything else is the verifier's fault and
says so; it never becomes a reward of 0.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from rlstack.common import safefs

REWARD_TXT = "reward.txt"
REWARD_JSON = "reward.json"
READ_LIMIT = 64 * 1024


class RewardError(ValueError):
    """The verifier wrote no usable reward."""


def read_rewards(verifier_dir: Path, within: Path | None = None) -> dict[str, float]:
    """Only regular files directly in ``verifier_dir`` count: a symlink (to another trial's reward, a
    host file) is not a reward. ``within``: the trusted directory above it (the trial's)."""
    within = within or verifier_dir
    json_path, txt_path = verifier_dir / REWARD_JSON, verifier_dir / REWARD_TXT
    if os.path.islink(json_path) or os.path.islink(txt_path):
        raise RewardError("the verifier left a symlink as its reward file")
    if safefs.is_file(json_path, within):
        text = safefs.read_text(json_path, within, limit=READ_LIMIT).strip()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RewardError(f"{REWARD_JSON} is not JSON: {exc}") from None
        values = data if isinstance(data, dict) else {"reward": data}
        if not values:
            raise RewardError(f"{REWARD_JSON} is an empty object")
        return {str(key): _number(value, f"{REWARD_JSON}[{key!r}]") for key, value in values.items()}
    if safefs.is_file(txt_path, within):
        text = safefs.read_text(txt_path, within, limit=READ_LIMIT).strip()
        try:
            value = float(text)
        except ValueError:
            raise RewardError(f"{REWARD_TXT} holds {text[:80]!r}, not a number") from None
        return {"reward": _number(value, REWARD_TXT)}
    raise RewardError(f"the verifier wrote neither /logs/verifier/{REWARD_TXT} nor /logs/verifier/{REWARD_JSON}")


def scalar_reward(rewards: dict[str, float]) -> float:
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    raise RewardError(f"{REWARD_JSON} has keys {sorted(rewards)} and no 'reward'")


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RewardError(f"{where} is {value!r}, not a number")
    if not math.isfinite(value):
        raise RewardError(f"{where} is {value!r}, not a finite number")
    return float(value)
