"""Every sub-package under services/ is in pyproject.toml's ``packages``: a missing one installs
fine editable (as the suite runs) and is absent from the images' non-editable install, where the
first import of it fails (``rlstack.episodes.inside`` in a trial pod's env server, on a real node)."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO


def test_every_package_directory_is_listed():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    services = REPO / "services"
    found = {".".join(["rlstack", *init.parent.relative_to(services).parts]) for init in services.rglob("__init__.py")}
    assert found - listed == set(), f"add to pyproject.toml's packages: {sorted(found - listed)}"
    assert listed - found == set(), f"listed but gone: {sorted(listed - found)}"
