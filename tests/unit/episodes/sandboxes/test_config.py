"""Sandbox settings: the factory picks the backend by ``type``; typos are refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlstack.episodes.sandboxes import LocalSandboxConfig, build_sandbox


def test_factory_builds_the_local_backend_in_task_images_by_default(tmp_path):
    from rlstack.episodes.sandboxes.image import ImageSandbox
    from rlstack.episodes.sandboxes.local import LocalSandbox

    sandbox = build_sandbox(LocalSandboxConfig(work_dir=tmp_path))
    assert isinstance(sandbox, ImageSandbox) and sandbox.kind == "local" and sandbox.work_dir == tmp_path
    host = build_sandbox(LocalSandboxConfig(environment="host", work_dir=tmp_path))
    assert isinstance(host, LocalSandbox) and host.work_dir == tmp_path


def test_unknown_settings_are_refused():
    with pytest.raises(ValidationError, match="kill_grace"):
        LocalSandboxConfig.model_validate({"kill_grace": 3})
    with pytest.raises(ValidationError, match="kill_grace_sec"):
        LocalSandboxConfig(kill_grace_sec=-1)
