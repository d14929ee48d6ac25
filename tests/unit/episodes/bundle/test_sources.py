"""What the built-in agent's runtime copies: rlstack's own modules the agent imports (lazy imports
included, nothing else of rlstack) and the distributions it needs, pinned as the venv has them."""

from __future__ import annotations

import importlib.metadata as md

from rlstack.episodes.bundle.python_runtime import (
    AGENT_DISTRIBUTIONS,
    distribution_closure,
    rlstack_closure,
)
from tests.conftest import REPO


def test_rlstack_closure_is_the_agent_and_what_it_imports() -> None:
    services = REPO / "services"
    files = {p.relative_to(services).as_posix() for p in rlstack_closure(services, "rlstack.agent")}
    assert {"__init__.py", "agent/__init__.py", "agent/__main__.py", "agent/loop.py", "agent/config.py", "agent/tools.py",
            "common/__init__.py", "common/auth.py", "common/names.py"} <= files
    assert not any(f.startswith(("episodes/", "proxy/", "trainer/")) for f in files)


def test_lazy_and_relative_imports_are_followed(tmp_path) -> None:
    pkg = tmp_path / "services"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "main.py").write_text("def f():\n    from rlstack.b import lazy\n    from . import sibling\n")
    (pkg / "a" / "sibling.py").write_text("import json\n")
    (pkg / "b" / "__init__.py").write_text("")
    (pkg / "b" / "lazy.py").write_text("")
    (pkg / "b" / "unused.py").write_text("")
    files = {p.relative_to(pkg).as_posix() for p in rlstack_closure(pkg, "rlstack.a.main")}
    assert files == {"__init__.py", "a/__init__.py", "a/main.py", "a/sibling.py", "b/__init__.py", "b/lazy.py"}


def test_distributions_come_with_their_requirements_but_no_extras() -> None:
    names = {d.metadata["Name"].lower().replace("_", "-") for d in distribution_closure(AGENT_DISTRIBUTIONS)}
    assert {"httpx", "httpcore", "h11", "anyio", "certifi", "idna", "pydantic", "pydantic-core", "pydantic-settings",
            "python-dotenv", "typing-extensions", "typing-inspection", "annotated-types"} <= names
    assert not names & {"click", "rich", "pygments", "brotli", "h2", "email-validator", "boto3", "pyyaml"}
    assert {d.version for d in distribution_closure(["httpx"]) if d.metadata["Name"] == "httpx"} == {md.version("httpx")}
