"""The manifest: what it accepts, how ``needs`` reads, and the sentence for an agent it lacks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlstack.episodes.bundle.manifest import (
    AgentEntry,
    BundleManifest,
    load_manifest,
    write_manifest,
)
from rlstack.episodes.bundle.paths import (
    AGENT_PROGRAMS,
    BUILTIN_AGENT_ARGV,
    BUNDLE_LIB,
    BUNDLE_LOADER,
    BUNDLE_MOUNT,
)


def manifest(**agents: AgentEntry) -> BundleManifest:
    return BundleManifest(mount=BUNDLE_MOUNT, arch="x86_64", glibc="2.36", agents=agents, digest="sha256:" + "0" * 64,
                          size_bytes=1, files=1, inputs="sha256:x")


def test_round_trip(tmp_path) -> None:
    m = manifest(codex=AgentEntry(program="/opt/rlstack/bin/codex", version="0.171.0", image_programs=("/bin/sh",),
                                  version_argv=("/opt/rlstack/bin/codex", "--version")))
    write_manifest(tmp_path, m)
    assert load_manifest(tmp_path) == m


@pytest.mark.parametrize(("needs", "minimum"), [("any", None), ("glibc>=2.17", (2, 17)), ("glibc>=2.34", (2, 34))])
def test_needs(needs, minimum) -> None:
    assert AgentEntry(program="/p", version="1", needs=needs).min_glibc == minimum


@pytest.mark.parametrize("needs", ["glibc", "musl", "glibc>=2", "glibc >= 2.3", ""])
def test_bad_needs_are_refused(needs) -> None:
    with pytest.raises(ValidationError, match="needs must be"):
        AgentEntry(program="/p", version="1", needs=needs)


def test_unknown_fields_and_digests_are_refused() -> None:
    with pytest.raises(ValidationError):
        BundleManifest.model_validate({**manifest().model_dump(), "extra": 1})
    with pytest.raises(ValidationError):
        BundleManifest.model_validate({**manifest().model_dump(), "digest": "md5:abc"})


def test_a_missing_agent_says_how_to_add_it() -> None:
    with pytest.raises(KeyError, match="has no 'opencode' .* --agents"):
        manifest().agent("opencode")


def test_paths_are_under_the_mount() -> None:
    assert all(p.startswith(BUNDLE_MOUNT + "/bin/") for p in AGENT_PROGRAMS.values())
    assert BUNDLE_LOADER.startswith(BUNDLE_LIB + "/") and BUILTIN_AGENT_ARGV[0] == AGENT_PROGRAMS["builtin"]
    assert "-I" in BUILTIN_AGENT_ARGV
