from pathlib import Path

import pytest
from pydantic import ValidationError

from rlstack.launcher.config import RunConfig

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_config_validates(path):
    assert RunConfig.load(path).services


def test_duplicate_service_names_are_refused():
    with pytest.raises(ValidationError, match="repeated: \\['batcher'\\]"):
        RunConfig.model_validate({"name": "x", "services": [
            {"name": "batcher", "module": "rlstack.batcher"}, {"name": "batcher", "module": "rlstack.batcher"}]})


def test_unknown_keys_are_refused():
    with pytest.raises(ValidationError, match="modul"):
        RunConfig.model_validate({"name": "x", "services": [{"name": "a", "modul": "rlstack.batcher"}]})
