"""What each bundle entry is made of, where the builder finds it on this machine, and where it goes.

claude-code 2.1.330 and opencode 1.18.33 are native Bun-compiled executables (their npm packages'
``bin`` is the binary itself, no JavaScript runs under node); codex 0.171.0's npm ``bin`` is a node
launcher (``codex.js``) that execs a static musl binary, which is bundled without the launcher (the
launcher only adds ``CODEX_MANAGED_*`` update hints). Node itself is bundled for scaffolds in
JavaScript; no shipped agent needs it. Adding an agent is one ``Component`` here.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import rlstack
from rlstack.episodes.bundle import paths
from rlstack.episodes.bundle.python_runtime import AGENT_PACKAGE, python_inputs, stage_python
from rlstack.episodes.bundle.sources import CLAUDE_CODE_BIN, CODEX_BIN, OPENCODE_BIN


@dataclass(frozen=True)
class Component:
    name: str
    program: str
    """Absolute path under the mount: a link in ``bin/`` to ``target``."""
    target: str
    """Where the real file is, relative to the bundle root."""
    stage: Callable[[Path, Path], object]
    """Copy the component's files into the staging directory (``stage, repo``)."""
    inputs: Callable[[Path], list[Path]]
    """Files and directories it is built from: their sizes and times decide whether to rebuild."""
    version: Callable[[Path], str]
    version_args: tuple[str, ...] = ("--version",)
    image_programs: tuple[str, ...] = ("/bin/sh",)


def _npm_version(package_json: Path) -> str:
    return json.loads(package_json.read_text())["version"]


def _arch() -> str:
    return {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _triple() -> str:
    return f"{platform.machine()}-unknown-linux-musl"


# -- builtin: CPython and rlstack.agent -------------------------------------------------------

BUILTIN = Component(
    name="builtin", program=paths.PYTHON, target=f"python/bin/python{sys.version_info.major}.{sys.version_info.minor}",
    stage=stage_python, inputs=python_inputs,
    version=lambda repo: f"rlstack {rlstack.__version__}, CPython {platform.python_version()}",
    version_args=("-I", "-m", AGENT_PACKAGE, "--help"), image_programs=("bash",))
"""Its ``bash`` tool runs the image's bash."""


# -- claude-code: a Bun executable --------------------------------------------------------------

def _claude_binary(repo: Path) -> Path:
    return (repo / CLAUDE_CODE_BIN).resolve()


def _stage_claude(stage: Path, repo: Path) -> None:
    (stage / "claude-code").mkdir()
    shutil.copy2(_claude_binary(repo), stage / "claude-code" / "claude")


CLAUDE_CODE = Component(
    name="claude-code", program=paths.CLAUDE, target="claude-code/claude", stage=_stage_claude,
    inputs=lambda repo: [_claude_binary(repo)],
    version=lambda repo: _npm_version(repo / ".cache/claude-code/node_modules/@anthropic-ai/claude-code/package.json"),
    image_programs=("bash|zsh",))
"""Its Bash tool runs the image's bash or zsh ("No suitable shell found" otherwise)."""


# -- codex: a static musl executable in its package layout ----------------------------------

def _codex_vendor(repo: Path) -> Path:
    return repo / f".cache/codex/node_modules/@openai/codex-linux-{_arch()}/vendor/{_triple()}"


CODEX_SKIP = ("voice",)
"""``codex-resources/voice``: the realtime voice host with its own GStreamer and glib (51 MB of
glibc-linked libraries); a trial never speaks."""


def _stage_codex(stage: Path, repo: Path) -> None:
    # The layout codex-package.json names (bin/, codex-path/ with rg, codex-resources/): codex
    # finds them next to its own executable.
    shutil.copytree(_codex_vendor(repo), stage / "codex", symlinks=True, ignore=shutil.ignore_patterns(*CODEX_SKIP))


CODEX = Component(
    name="codex", program=paths.CODEX, target="codex/bin/codex", stage=_stage_codex,
    inputs=lambda repo: [_codex_vendor(repo), (repo / CODEX_BIN).resolve()],
    version=lambda repo: json.loads((_codex_vendor(repo) / "codex-package.json").read_text())["version"])


# -- opencode: a Bun executable -------------------------------------------------------------

def _opencode_binary(repo: Path) -> Path:
    # The baseline build (no AVX2) runs on any x86-64 node; npm's postinstall picks by the CPU
    # of the machine that installed it.
    modules = repo / ".cache/opencode/node_modules"
    for package in (f"opencode-linux-{_arch()}-baseline", f"opencode-linux-{_arch()}"):
        if (candidate := modules / package / "bin" / "opencode").is_file():
            return candidate
    return (repo / OPENCODE_BIN).resolve()


def _stage_opencode(stage: Path, repo: Path) -> None:
    (stage / "opencode").mkdir()
    shutil.copy2(_opencode_binary(repo), stage / "opencode" / "opencode")


OPENCODE = Component(
    name="opencode", program=paths.OPENCODE, target="opencode/opencode", stage=_stage_opencode,
    inputs=lambda repo: [_opencode_binary(repo)],
    version=lambda repo: _npm_version(repo / ".cache/opencode/node_modules/opencode-ai/package.json"))


# -- node: the host's Node.js ---------------------------------------------------------------

def _node_binary() -> Path:
    found = shutil.which("node")
    if found is None:
        raise FileNotFoundError("node is not on PATH (Debian: apt-get install nodejs)")
    return Path(found).resolve()


def _stage_node(stage: Path, repo: Path) -> None:
    (stage / "node" / "bin").mkdir(parents=True)
    shutil.copy2(_node_binary(), stage / "node" / "bin" / "node")


NODE = Component(
    name="node", program=paths.NODE, target="node/bin/node", stage=_stage_node,
    inputs=lambda repo: [_node_binary()],
    version=lambda repo: subprocess.run([str(_node_binary()), "--version"], capture_output=True, text=True,
                                        check=True).stdout.strip().removeprefix("v"),
    image_programs=())


COMPONENTS = {c.name: c for c in (BUILTIN, CLAUDE_CODE, CODEX, OPENCODE, NODE)}
"""Every entry a bundle can hold, by name (``--agents``)."""
assert set(COMPONENTS) == set(paths.AGENT_PROGRAMS)
