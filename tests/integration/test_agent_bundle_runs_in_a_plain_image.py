"""The agent bundle runs every agent in images that have none of its runtimes: a minimal Debian
with no python and no node, and an image with nothing but a static busybox and musl's loader (no
glibc at all). Mounted read-only at /opt/rlstack under bubblewrap, each program starts, the
built-in agent imports what it needs and plays an episode against a scripted model, and nothing of
the bundle leaks to the agent's children (their ``python3`` is the image's: none). The
compatibility check names a foreign architecture and a missing /bin/sh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlstack.episodes.bundle.build import DEFAULT_AGENTS, build_bundle
from rlstack.episodes.bundle.check import BundleIncompatible, check_image_compat, resolve_in_root
from rlstack.episodes.bundle.manifest import BundleManifest
from rlstack.episodes.bundle.paths import BUILTIN_AGENT_ARGV, NODE, PYTHON
from rlstack.episodes.bundle.verify import bwrap_argv, can_sandbox
from tests.conftest import REPO

pytestmark = pytest.mark.slow

BUNDLE = REPO / ".cache" / "agent-bundle"
PLAIN_ROOTFS = REPO / ".cache" / "plain-rootfs"
VERSIONS = {"claude-code": "2.1.330 (Claude Code)", "codex": "codex-cli 0.171.0", "opencode": "1.18.33"}


@pytest.fixture(scope="module")
def bundle() -> tuple[Path, BundleManifest]:
    """``make setup-agent-bundle``'s bundle: built here if its stamp is not current (about 40 s)."""
    if not can_sandbox():
        pytest.fail("bubblewrap cannot run here: `make setup-sandbox`")
    started = time.monotonic()
    manifest = build_bundle(BUNDLE, DEFAULT_AGENTS, repo=REPO)
    print(f"bundle ready in {time.monotonic() - started:.1f} s: {manifest.size_bytes / 1e6:.0f} MB, {manifest.digest}")
    return BUNDLE, manifest


@pytest.fixture(scope="module")
def debian() -> Path:
    """A minimal Debian bookworm (debootstrap ``--variant=minbase``), made once per machine."""
    root = PLAIN_ROOTFS / "bookworm"
    if not (root / ".complete").exists():
        if shutil.which("debootstrap") is None or os.geteuid() != 0:
            pytest.fail(f"no {root}: debootstrap (as root) makes it; `make setup-images` installs debootstrap")
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(root)], check=True, capture_output=True)
        (root / ".complete").touch()
    (root / "app").mkdir(exist_ok=True)  # the mount point of each test's writable /app
    return root


@pytest.fixture(scope="module")
def no_libc(tmp_path_factory) -> Path:
    """An image of busybox-static (``/bin/sh -> /bin/busybox``) and musl's loader: no glibc at all."""
    debs = PLAIN_ROOTFS / "debs"
    if not any(debs.glob("busybox-static_*.deb")) or not any(debs.glob("musl_*.deb")):
        debs.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "-q", "busybox-static", "musl"], cwd=debs, check=True, capture_output=True)
    root = tmp_path_factory.mktemp("busybox-musl")
    for deb in [*debs.glob("busybox-static_*.deb"), *debs.glob("musl_*.deb")]:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    (root / "bin" / "sh").symlink_to("/bin/busybox")
    for d in ("opt", "tmp", "proc", "dev", "app"):
        (root / d).mkdir(exist_ok=True)
    return root


def run_in(rootfs: Path, bundle: Path, argv: list[str], binds: list[tuple[Path, str]] = (),  # type: ignore[assignment]
           share_net: bool = False, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``argv`` in the image at ``rootfs`` with the bundle at /opt/rlstack, an empty environment
    but PATH, HOME=/tmp, LANG and ``env``."""
    return subprocess.run([*bwrap_argv(rootfs, bundle, binds=binds, share_net=share_net, env=env), *argv],
                          capture_output=True, text=True, timeout=120)


def test_a_second_build_changes_nothing(bundle) -> None:
    path, manifest = bundle
    before = (path / "manifest.json").stat().st_mtime_ns
    started = time.monotonic()
    again = build_bundle(path, DEFAULT_AGENTS, repo=REPO)
    assert again.digest == manifest.digest and (path / "manifest.json").stat().st_mtime_ns == before
    assert time.monotonic() - started < 15
    assert manifest.verified and manifest.arch == os.uname().machine
    assert {name: e.needs for name, e in manifest.agents.items()} == dict.fromkeys(DEFAULT_AGENTS, "any")


def test_the_plain_image_has_no_python_and_no_node(debian, bundle) -> None:
    for program in ("/usr/bin/python3", "/usr/local/bin/python3", "/usr/bin/node", "/usr/local/bin/node"):
        assert resolve_in_root(debian, program) is None, program
    for agent in bundle[1].agents:
        check_image_compat(debian, bundle[1], agent)


@pytest.mark.parametrize("agent", DEFAULT_AGENTS)
def test_each_agent_starts_in_the_plain_image(debian, bundle, agent) -> None:
    path, manifest = bundle
    done = run_in(debian, path, list(manifest.agents[agent].version_argv))
    assert done.returncode == 0, done.stderr
    if agent in VERSIONS:
        assert done.stdout.strip() == VERSIONS[agent]
    elif agent == "node":
        assert done.stdout.strip() == f"v{manifest.agents['node'].version}"
    else:
        assert "usage: rlstack.agent" in done.stdout


def test_builtin_python_imports_the_agent_and_leaks_nothing(debian, bundle) -> None:
    path, _ = bundle
    done = run_in(debian, path, [PYTHON, "-I", "-c", "import rlstack.agent, httpx, pydantic_settings; print('ok')"])
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    child = ("import os, subprocess; print(sorted(k for k in os.environ if k.startswith('PYTHON')));"
             "r = subprocess.run(['bash', '-c', 'python3 --version'], capture_output=True, text=True);"
             "print(r.returncode, r.stderr.strip())")
    done = run_in(debian, path, [PYTHON, "-c", child])
    assert done.returncode == 0, done.stderr
    env_line, result = done.stdout.splitlines()
    assert env_line == "[]"
    assert result.startswith("127 ") and "python3: command not found" in result


class ScriptedModel(BaseHTTPRequestHandler):
    """Two chat completions: a ``bash`` call, then ``submit``; every request body is kept."""

    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(body)
        if len(self.requests) == 1:
            command = "python3 --version; node --version; echo bundled > /app/done.txt"
            call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
        else:
            call = {"id": "c2", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def scripted_model() -> Iterator[tuple[str, list[dict]]]:
    ScriptedModel.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", ScriptedModel.requests
    server.shutdown()
    thread.join()


def test_builtin_agent_plays_an_episode_in_the_plain_image(debian, bundle, scripted_model, tmp_path) -> None:
    path, _ = bundle
    url, requests = scripted_model
    app = tmp_path / "app"
    app.mkdir()
    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "trial-key", "RLSTACK_AGENT_INSTRUCTION": "Write /app/done.txt."}
    done = run_in(debian, path, list(BUILTIN_AGENT_ARGV), binds=[(app, "/app")], share_net=True, env=env)
    assert done.returncode == 0, done.stderr
    assert (app / "done.txt").read_text() == "bundled\n"
    observation = requests[1]["messages"][-1]["content"]
    assert "python3: command not found" in observation and "node: command not found" in observation


@pytest.mark.parametrize("program", ["builtin", "node", "claude-code", "codex", "opencode"])
def test_patched_programs_run_where_there_is_no_glibc(no_libc, bundle, program) -> None:
    path, manifest = bundle
    assert resolve_in_root(no_libc, "/lib/x86_64-linux-gnu/libc.so.6") is None
    assert resolve_in_root(no_libc, "/lib/ld-musl-x86_64.so.1") is not None
    argv = {"builtin": [PYTHON, "-I", "-c", "import rlstack.agent.loop, ssl; print('ok')"],
            "node": [NODE, "-e", "console.log('ok')"]}.get(program, list(manifest.agents[program].version_argv))
    done = run_in(no_libc, path, argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == VERSIONS.get(program, "ok")
    if program in ("node", "codex", "opencode"):
        check_image_compat(no_libc, manifest, program)


def test_check_names_what_the_image_lacks(no_libc, bundle, tmp_path) -> None:
    manifest = bundle[1]
    with pytest.raises(BundleIncompatible, match="builtin runs bash from the image, which has none"):
        check_image_compat(no_libc, manifest, "builtin")
    empty = tmp_path / "empty"
    (empty / "bin").mkdir(parents=True)
    with pytest.raises(BundleIncompatible, match="the image has no /bin/sh"):
        check_image_compat(empty, manifest, "codex")
    arm = tmp_path / "arm64"
    (arm / "bin").mkdir(parents=True)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    header[16:20] = (3).to_bytes(2, "little") + (183).to_bytes(2, "little")  # ET_DYN, EM_AARCH64
    (arm / "bin" / "dash").write_bytes(bytes(header))
    (arm / "bin" / "sh").symlink_to("dash")
    with pytest.raises(BundleIncompatible, match=r"the image is aarch64 \(its /bin/sh\) but the agent bundle is built for x86_64"):
        check_image_compat(arm, manifest, "claude-code")


def test_a_program_left_on_the_images_glibc_is_refused_where_there_is_none(debian, no_libc, tmp_path) -> None:
    """The way out for a program patchelf cannot rewrite: it keeps its loader, the manifest says
    which glibc it needs, and the check refuses a musl image before any trial."""
    out = tmp_path / "bundle"
    manifest = build_bundle(out, ["node"], repo=REPO, keep_interpreter=["node"])
    node = manifest.agents["node"]
    assert node.min_glibc is not None and (2, 17) <= node.min_glibc <= (2, 36) and manifest.verified
    check_image_compat(debian, manifest, "node")
    assert run_in(debian, out, [NODE, "-e", "console.log('ok')"]).stdout == "ok\n"
    with pytest.raises(BundleIncompatible, match=rf"node uses the image's C library and needs {node.needs.replace('>=', ' >= ')}; the image has musl"):
        check_image_compat(no_libc, manifest, "node")
    assert run_in(no_libc, out, [NODE, "--version"]).returncode != 0
