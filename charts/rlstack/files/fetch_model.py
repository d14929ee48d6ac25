"""Put the policy model on the shared volume once, for every replica and the trainer to read.

Run by the chart's model Job. Sources: the Hugging Face hub (``hub``: repo id, revision, token
from $HF_TOKEN), a mounted directory (``copy``: a node's hostPath or an existing claim), or the
tiny CPU demo model that ``make run`` trains (``demo``: built here by ``rlstack make-demo-model``,
which the trainer image has; a CPU cluster then needs no host directory and no internet). The
chart gives each source its own directory (``<model.path>-<hash of the source>``), so a new
source is fetched beside the old one while running pods keep theirs. The model and its marker
are written to a sibling ``.partial`` directory, which is renamed into place: the marker (what
the replicas' and trainer's init containers wait for) appears with a complete model, never
before. A finished directory is never replaced: the same source means nothing to do (re-runs and
upgrades cost nothing), another source is refused. A directory without its marker was never
loaded by anyone (an interrupted fetch) and is replaced.
Standard library only, plus huggingface_hub (installed with transformers) for the hub and
rlstack for the demo.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

MARKER = ".rlstack-model.json"


def wanted(env: dict[str, str]) -> dict[str, str]:
    kind = env["RLSTACK_MODEL_SOURCE"]
    if kind == "hub":
        return {"source": "hub", "id": env["RLSTACK_MODEL_HUB_ID"], "revision": env.get("RLSTACK_MODEL_HUB_REVISION") or "main"}
    if kind == "copy":
        return {"source": "copy", "from": env["RLSTACK_MODEL_COPY_FROM"]}
    if kind == "demo":
        steps = env.get("RLSTACK_MODEL_DEMO_STEPS")
        return {"source": "demo", **({"steps": steps} if steps else {})}
    raise SystemExit(f"unknown RLSTACK_MODEL_SOURCE {kind!r} (hub, copy or demo)")


def fetch(want: dict[str, str], into: Path) -> None:
    if want["source"] == "hub":
        from huggingface_hub import snapshot_download

        snapshot_download(want["id"], revision=want["revision"], local_dir=into, token=os.environ.get("HF_TOKEN") or None)
        shutil.rmtree(into / ".cache", ignore_errors=True)  # download bookkeeping, not the model
    elif want["source"] == "demo":
        steps = ["--steps", want["steps"]] if "steps" in want else []  # unset: the demo `make run` trains
        subprocess.run([sys.executable, "-m", "rlstack.cli", "make-demo-model", "--out", str(into), *steps], check=True)
    else:
        source = Path(want["from"])
        if not source.is_dir():
            raise SystemExit(f"{source} is not a directory: is the hostPath/claim mounted, and does it hold the model?")
        shutil.copytree(source, into)


def main(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    dest = Path(env["RLSTACK_MODEL_DIR"])
    want = wanted(env)
    marker = dest / MARKER
    if marker.is_file():
        held = json.loads(marker.read_text())
        if held == want:
            print(f"{dest}: already holds {want}")
            return 0
        raise SystemExit(f"{dest} already holds {held}, not {want}: a finished model directory is never replaced "
                         "(running pods may have it open); the chart names one directory per source")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    print(f"fetching {want} into {dest}", flush=True)
    fetch(want, partial)
    if not (partial / "config.json").is_file():
        raise SystemExit(f"{want} holds no config.json: not a Hugging Face model directory")
    (partial / MARKER).write_text(json.dumps(want))
    if dest.exists():  # no marker: an interrupted fetch nobody loaded (pods wait for the marker)
        shutil.rmtree(dest)
    partial.rename(dest)
    print(f"{dest}: ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
