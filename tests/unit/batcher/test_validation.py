import pytest
from pydantic import ValidationError

from rlstack.batcher.validation import check_shapes
from rlstack.common.contracts.atropos import ScoredData
from tests.helpers.groups import make_group


def locs(group: dict) -> list[list]:
    return [p["loc"] for p in check_shapes(ScoredData.model_validate(group))]


def test_well_formed_group_passes():
    assert locs(make_group(size=4, length=16)) == []


def test_row_count_mismatch_names_the_field():
    group = make_group(size=2)
    group["scores"] = [1.0]
    assert locs(group) == [["body", "scores"]]


def test_ragged_mask_names_field_and_row():
    group = make_group(size=2, length=6)
    group["masks"][1] = group["masks"][1][:-1]
    assert locs(group) == [["body", "masks", 1]]


def test_sequence_without_trained_position_is_rejected():
    group = make_group(size=2, length=4)
    group["masks"][0] = [-100] * 4
    problems = check_shapes(ScoredData.model_validate(group))
    assert problems[0]["loc"] == ["body", "masks", 0]
    assert "no trained position" in problems[0]["msg"]


def test_logprob_length_mismatch_is_rejected():
    group = make_group(size=2, length=6)
    group["inference_logprobs"][0].append(-1.0)
    assert locs(group) == [["body", "inference_logprobs", 0]]


def test_per_sequence_advantages_are_allowed():
    group = make_group(size=2, length=6)
    group["advantages"] = [[0.5], [-0.5]]
    assert locs(group) == []


def test_empty_group_is_rejected():
    assert locs({"tokens": [], "masks": [], "scores": []}) == [["body", "tokens"]]


def test_sampling_versions_give_the_group_its_oldest_version_and_are_checked():
    group = make_group(size=2)
    group["sampling_versions"] = [[3], [2, 3]]
    assert ScoredData.model_validate(group).weight_version == 2 and locs(group) == []
    group["sampling_versions"] = [[3]]
    assert locs(group) == [["body", "sampling_versions"]]
    with pytest.raises(ValidationError, match="strictly increasing"):
        ScoredData.model_validate({**group, "sampling_versions": [[3, 2], [3]]})
    with pytest.raises(ValidationError, match="weight_version: 5, but the oldest of sampling_versions is 2"):
        ScoredData.model_validate({**group, "sampling_versions": [[3], [2, 3]], "weight_version": 5})
