"""The bundle's content digest follows content, modes and links; the inputs stamp follows sizes
and times (a touched source rebuilds, an untouched one does not)."""

from __future__ import annotations

import os

from rlstack.episodes.bundle.tree import content_digest, inputs_digest


def test_content_digest_follows_content_modes_and_links(tmp_path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "prog").write_text("one")
    (tmp_path / "link").symlink_to("bin/prog")
    (tmp_path / "manifest.json").write_text("{}")
    first, size, files = content_digest(tmp_path, skip=["manifest.json"])
    assert first.startswith("sha256:") and (size, files) == (3, 1)
    (tmp_path / "manifest.json").write_text('{"other": 1}')
    assert content_digest(tmp_path, skip=["manifest.json"])[0] == first
    (tmp_path / "bin" / "prog").chmod(0o755)
    second = content_digest(tmp_path, skip=["manifest.json"])[0]
    assert second != first
    (tmp_path / "link").unlink()
    (tmp_path / "link").symlink_to("bin")
    assert content_digest(tmp_path, skip=["manifest.json"])[0] not in (first, second)


def test_inputs_digest_follows_size_and_time(tmp_path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a").write_text("a")
    stamp = inputs_digest([tmp_path / "src"], ["agents=codex"])
    assert inputs_digest([tmp_path / "src"], ["agents=codex"]) == stamp
    assert inputs_digest([tmp_path / "src"], ["agents=node"]) != stamp
    os.utime(tmp_path / "src" / "a", ns=(1, 1))
    touched = inputs_digest([tmp_path / "src"], ["agents=codex"])
    assert touched != stamp
    assert inputs_digest([tmp_path / "missing"]) != inputs_digest([])
