import pytest

from rlstack.batcher.validation import check_shapes
from rlstack.common.contracts.atropos import ScoredData
from rlstack.envs.rollout import RolloutError, build_group


def response(ids_per_choice, prompt=(1, 5, 9)):
    return {"prompt_token_ids": list(prompt), "choices": [
        {"index": i, "message": {"content": "x"}, "provider_specific_fields": {"token_ids": ids},
         "logprobs": {"content": [{"logprob": -0.5 * (k + 1)} for k in range(len(ids))]}}
        for i, ids in enumerate(ids_per_choice)]}


def test_group_is_built_from_vllm_ids_and_passes_the_batcher_checks():
    group = build_group(response([[7, 8], [4]]), [1.0, 0.0], weight_version=3)
    assert group["tokens"] == [[1, 5, 9, 7, 8], [1, 5, 9, 4]]
    assert group["masks"] == [[-100, -100, -100, 7, 8], [-100, -100, -100, 4]]
    assert group["inference_logprobs"][0] == [0.0, 0.0, 0.0, -0.5, -1.0]
    assert group["weight_version"] == 3
    assert check_shapes(ScoredData.model_validate(group)) == []


def test_missing_ids_is_an_error_not_a_retokenisation():
    bad = response([[7]])
    del bad["choices"][0]["provider_specific_fields"]
    with pytest.raises(RolloutError, match="return_token_ids"):
        build_group(bad, [1.0], None)
