"""Every relative link in the docs reaches a file (and, with ``#anchor``, a heading of it), and every
repository path the docs cite in backticks exists: a renamed test or moved module must take its
mentions with it, or this fails naming the doc, the line and the target."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = sorted([REPO / "README.md", REPO / "charts" / "rlstack" / "README.md", *(REPO / "docs").rglob("*.md")])
TOP = ("services/", "tests/", "bench/", "charts/", "k8s/", "examples/", "docs/", ".ci/")
"""A backticked path starting here is a repository path, checked; shorter forms (``sandboxes/pods.py``,
relative to the package) are read as prose."""
IN_A_TASK = {"tests/test.sh"}
"""Paths inside a Harbor task's directory, not the repository's."""

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`([^`\s]+)`")
FENCE = re.compile(r"^(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path):
        if m := re.match(r"^#{1,6} (.+)$", line[1]):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """Numbered lines outside fenced code blocks (a ``# comment`` in a shell block is no heading)."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def broken_links(doc: Path) -> list[str]:
    out = []
    for n, line in prose_lines(doc):
        for m in LINK.finditer(line):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            where = f"{doc.relative_to(REPO)}:{n}: {target}"
            if not path.exists():
                out.append(f"{where} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                out.append(f"{where} (no heading #{anchor} in {path.relative_to(REPO)})")
    return out


def missing_paths(doc: Path) -> list[str]:
    out = []
    for n, line in prose_lines(doc):
        for m in CODE_PATH.finditer(line):
            cited = m.group(1).rstrip(".,:;")
            if not cited.startswith(TOP) or cited in IN_A_TASK or any(c in cited for c in "*<>{}$|"):
                continue
            file, _, test = cited.partition("::")
            if not (REPO / file).exists():
                out.append(f"{doc.relative_to(REPO)}:{n}: `{cited}` (no such path)")
            elif test and f"def {test.split('[')[0]}(" not in (REPO / file).read_text():
                out.append(f"{doc.relative_to(REPO)}:{n}: `{cited}` (no such test in {file})")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_and_cited_path_resolves(doc):
    problems = broken_links(doc) + missing_paths(doc)
    assert not problems, "\n".join(problems)


def test_the_checker_finds_a_dead_link_a_dead_anchor_and_a_missing_path(tmp_path, monkeypatch):
    doc = REPO / "docs" / "_probe_of_the_link_check.md"
    doc.write_text("# A heading\n\n[ok](#a-heading) [gone](nowhere.md) [anchor](testing.md#no-such-heading)\n"
                   "`services/no_such_module.py` `tests/conftest.py::no_such_test`\n"
                   "```\n# not a heading\n[not a link](nowhere.md)\n```\n")
    try:
        problems = broken_links(doc) + missing_paths(doc)
    finally:
        doc.unlink()
    assert [p.split(": ", 1)[1] for p in problems] == [
        "nowhere.md (no such file)", "testing.md#no-such-heading (no heading #no-such-heading in docs/testing.md)",
        "`services/no_such_module.py` (no such path)", "`tests/conftest.py::no_such_test` (no such test in tests/conftest.py)"]


def test_the_guide_names_no_issue_numbers():
    """Issue numbers mean nothing to a reader of the guide; the record (docs/record/) may keep them."""
    found = [f"{doc.relative_to(REPO)}:{n}: {m.group(0)}" for doc in DOCS if "record" not in doc.parts
             for n, line in prose_lines(doc) for m in re.finditer(r"\b[Ii]ssues? #?\d+", line)]
    assert not found, "\n".join(found)
