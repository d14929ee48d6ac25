"""The policy version a replica holds, handed from vLLM's workers to the sidecar through files.

The trainer stores the version in each worker with the weights (``collective_rpc``); each worker
then writes ``worker-<rank>.json`` into ``RLSTACK_WEIGHT_STATE_DIR``, a directory the sidecar
makes and reads at every heartbeat. Asking the worker instead (a ``collective_rpc`` per beat)
woke it every time, and after each message vLLM's worker spins on its shared-memory queue for a
second: at a 1 s heartbeat an idle replica kept a CPU core at 100%, at the default 5 s a fifth of
one. A worker busy with a weight sync also answered late, past the registry's TTL.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

STATE_DIR_ENV = "RLSTACK_WEIGHT_STATE_DIR"
log = logging.getLogger(__name__)


def write_weight_state(directory: str | Path, rank: int, version: int, adapter: str | None) -> None:
    """Replace this worker's file atomically (the sidecar may be reading it)."""
    path = Path(directory) / f"worker-{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": int(version), "adapter": adapter}))
    os.replace(tmp, path)


def read_weight_state(directory: Path) -> tuple[int, str | None] | None:
    """The lowest version over the workers that wrote one (a worker that missed an update holds
    the older weights) and its adapter; None before any was stored."""
    states = []
    for path in directory.glob("worker-*.json"):
        try:
            states.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            log.debug("weight state %s not readable: %s", path, exc)
    if not states:
        return None
    oldest = min(states, key=lambda state: int(state["version"]))
    return int(oldest["version"]), oldest.get("adapter")
