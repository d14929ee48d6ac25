"""ImageSettings: bounded fields, RLSTACK_TASKS_* env vars, and how a base map key matches a reference."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlstack.episodes.images.config import ImageSettings

PIN = "@sha256:" + "0" * 64


def test_defaults_and_bounds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = ImageSettings()
    assert (settings.builder, settings.jobs, settings.network) == ("podman", 2, "host")
    assert settings.cache_dir == tmp_path / ".cache" / "task-images"
    for bad in ({"jobs": 0}, {"jobs": 33}, {"builder": "docker"}, {"network": "bridge"}, {"unknown": 1},
                {"base_map": {"debian": ""}}):
        with pytest.raises(ValidationError):
            ImageSettings(**bad)


def test_env_vars(monkeypatch, tmp_path):
    monkeypatch.setenv("RLSTACK_TASKS_BASE_MAP", '{"debian:bookworm-slim":"localhost/debian:bookworm-slim"}')
    monkeypatch.setenv("RLSTACK_TASKS_JOBS", "4")
    monkeypatch.setenv("RLSTACK_TASKS_BUILDER", "buildah")
    monkeypatch.setenv("RLSTACK_TASKS_CACHE_DIR", str(tmp_path))
    settings = ImageSettings()
    assert settings.base_map == {"debian:bookworm-slim": "localhost/debian:bookworm-slim"}
    assert (settings.jobs, settings.builder, settings.cache_dir) == (4, "buildah", tmp_path)
    assert ImageSettings(jobs=1).jobs == 1  # arguments (the CLI's flags) win over env vars


def test_map_ref_matching():
    settings = ImageSettings(base_map={"debian:bookworm-slim": "L/deb", "ubuntu": "L/ubu", f"alpine:3{PIN}": "L/alp",
                                       "registry.local:5000/x": "L/x"})
    assert settings.map_ref("debian:bookworm-slim") == "L/deb"
    assert settings.map_ref(f"debian:bookworm-slim{PIN}") == "L/deb"  # no digest in the key: any digest
    assert settings.map_ref("docker.io/library/debian:bookworm-slim") == "L/deb"
    assert settings.map_ref("debian:bookworm") is None
    assert settings.map_ref("ubuntu:latest") == settings.map_ref("ubuntu") == settings.map_ref(f"ubuntu{PIN}") == "L/ubu"
    assert settings.map_ref(f"alpine:3{PIN}") == "L/alp"
    assert settings.map_ref("alpine:3") is None
    assert settings.map_ref("registry.local:5000/x:latest") == "L/x"
