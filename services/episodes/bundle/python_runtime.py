"""The built-in agent's runtime: this interpreter's CPython (binary, stdlib, lib-dynload) and a
site-packages holding exactly what ``python -m rlstack.agent`` imports.

Layout ``python/bin/python3.X`` and ``python/lib/python3.X/os.py``: CPython's getpath resolves the
executable's symlinks (``bin/python3`` links here) and searches up from its directory for
``lib/python3.X/os.py`` (prefix) and ``lib/python3.X/lib-dynload`` (exec_prefix), so it finds its
stdlib with no PYTHONHOME, a variable every child of the agent would inherit (and break the image's
own python3 with). Sources are compiled to unchecked-hash ``.pyc`` files: the bundle is read-only
and may be copied with new mtimes (an init container), and ``unchecked-hash`` pycs never go stale
by time, so no import compiles at trial time.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from rlstack.episodes.bundle.paths import BUNDLE_MOUNT

AGENT_DISTRIBUTIONS = ("httpx", "pydantic", "pydantic-core", "pydantic-settings")
"""What the built-in agent imports from outside rlstack; their requirements come along."""
AGENT_PACKAGE = "rlstack.agent"
INSIDE_PACKAGES = ("rlstack.episodes.inside.trial", "rlstack.episodes.inside.copy_bundle", "rlstack.episodes.inside.become")
"""What runs inside a trial's container from the bundle: a pod's phase driver and bundle copy, the
local sandbox's switch to the image's user."""
STDLIB_SKIP = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "__pycache__", "site-packages",
               "lib2to3", "pydoc_data"}
"""Directories of the stdlib no agent imports (test suites, GUI, pip bootstrap): about 40 MB."""
DYNLOAD_SKIP = ("_tkinter", "_test", "_ctypes_test", "xxlimited", "_xxtestfuzz", "xxsubtype")
PYTHON_TAG = f"python{sys.version_info.major}.{sys.version_info.minor}"


def stage_python(stage: Path, repo: Path) -> Path:
    """Copy CPython and the agent's packages into ``stage/python``; returns the interpreter."""
    base = Path(sys.base_prefix)
    exe = (base / "bin" / PYTHON_TAG).resolve()
    root = stage / "python"
    (root / "bin").mkdir(parents=True)
    shutil.copy2(exe, root / "bin" / PYTHON_TAG)
    stdlib = root / "lib" / PYTHON_TAG
    shutil.copytree(base / "lib" / PYTHON_TAG, stdlib, symlinks=True, ignore=_stdlib_ignore)
    site = stdlib / "site-packages"
    site.mkdir()
    for dist in distribution_closure(AGENT_DISTRIBUTIONS):
        copy_distribution(dist, site)
    for module in bundled_sources(repo):
        target = site / "rlstack" / module.relative_to(repo / "services")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(module, target)
    compile_tree(stage, root / "lib")
    return root / "bin" / PYTHON_TAG


def python_inputs(repo: Path) -> list[Path]:
    """What ``stage_python`` copies, for the rebuild stamp: the interpreter, libpython, lib-dynload,
    each distribution's RECORD (a reinstall rewrites it) and the rlstack sources."""
    base = Path(sys.base_prefix)
    records = [Path(d.locate_file(f)) for d in distribution_closure(AGENT_DISTRIBUTIONS)
               for f in d.files or [] if f.name == "RECORD"]
    return [base / "bin" / PYTHON_TAG, *sorted(base.joinpath("lib").glob("libpython*")),
            base / "lib" / PYTHON_TAG / "lib-dynload", *records, *bundled_sources(repo)]


def bundled_sources(repo: Path) -> list[Path]:
    """The rlstack modules the bundle carries: the built-in agent's and what runs inside a trial's container."""
    found: set[Path] = set()
    for package in (AGENT_PACKAGE, *INSIDE_PACKAGES):
        found.update(rlstack_closure(repo / "services", package))
    return sorted(found)


def _stdlib_ignore(directory: str, names: list[str]) -> set[str]:
    skipped = {n for n in names if n in STDLIB_SKIP or n.startswith("config-") or n.endswith((".pyc", ".a"))}
    if Path(directory).name == "lib-dynload":
        skipped |= {n for n in names if n.startswith(DYNLOAD_SKIP)}
    return skipped


def distribution_closure(names: Iterable[str]) -> list[md.Distribution]:
    """The installed distributions ``names`` need, with their requirements (no extras), as this
    environment has them: the bundle pins what the venv pins."""
    from packaging.requirements import Requirement  # packaging: present wherever pip is

    todo, found = list(names), {}
    while todo:
        name = todo.pop()
        key = _canonical(name)
        if key in found:
            continue
        dist = md.distribution(name)
        found[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [found[k] for k in sorted(found)]


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def copy_distribution(dist: md.Distribution, site: Path) -> None:
    """Every file its RECORD lists under site-packages (not scripts, not bytecode)."""
    for entry in dist.files or []:
        parts = Path(entry).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts or entry.suffix == ".pyc":
            continue
        source = Path(dist.locate_file(entry))
        if source.is_file():
            target = site / entry
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def rlstack_closure(services: Path, package: str) -> list[Path]:
    """The rlstack source files ``package`` imports, at any depth and inside functions too (read
    from the source, so a lazy import is not missed), with each package's ``__init__.py``."""
    files: set[Path] = set()
    todo = [package, f"{package}.__main__"]
    while todo:
        name = todo.pop()
        path = _module_file(services, name)
        if path is None or path in files:
            continue
        files.add(path)
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            if (init := _module_file(services, ".".join(parts[:i]))) and init.name == "__init__.py":
                files.add(init)
        todo.extend(_imports(path, name))
    return sorted(files)


def _module_file(services: Path, name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != "rlstack":
        return None
    base = services.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, name: str) -> list[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.append(module)
            found += [f"{module}.{a.name}" for a in node.names]  # ``from pkg import submodule``
    return [m for m in found if m.startswith("rlstack")]


def compile_tree(stage: Path, lib: Path) -> None:
    """Byte-compile with the running interpreter (the same CPython as the bundled one), with file
    names as they will be seen under the mount."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
                    "-s", str(stage), "-p", BUNDLE_MOUNT, str(lib)], check=True, stdout=subprocess.DEVNULL)
