"""How the relay turns what a replica reports into each choice's sampling versions."""

from rlstack.common.names import adapter_name, adapter_version
from rlstack.proxy.relay.versions import bracketed, from_spans, label, of_adapter, stamp


def test_labels_are_our_integers_and_vllms_default_is_unknown():
    assert label("12") == 12 and label(3) == 3
    assert label("default") is None and label(None) is None and label("-1") is None and label("1.5") is None


def test_spans_give_the_sorted_versions_and_any_unknown_span_makes_the_choice_unknown():
    assert from_spans([{"version": "4", "start": 0, "end": 7}]) == [4]
    assert from_spans([{"version": "4", "start": 0, "end": 3}, {"version": "5", "start": 3, "end": 9}]) == [4, 5]
    assert from_spans([{"version": "default", "start": 0, "end": 3}, {"version": "5", "start": 3, "end": 9}]) is None
    assert from_spans(None) is None and from_spans([]) is None


def test_a_label_that_moved_during_the_call_means_the_call_may_span_both():
    assert bracketed(3, 3) == [3]
    assert bracketed(3, 4) == [3, 4]
    assert bracketed(4, 3) == [3, 4]  # a trainer resumed from an older checkpoint: still two versions
    assert bracketed(None, 3) is None and bracketed(3, None) is None


def test_an_adapters_name_carries_its_version_and_other_names_none():
    assert of_adapter(adapter_name("policy", 7)) == 7 == adapter_version("policy-lora-v7")
    assert of_adapter("policy") is None and of_adapter(None) is None and adapter_version("-lora-v3") is None
    assert adapter_version("policy-lora-vx") is None


def test_stamp_puts_known_versions_on_their_choices_only():
    answer = {"choices": [{"index": 0}, {"index": 1}]}
    assert stamp(answer, [[2], None])["choices"] == [{"index": 0, "weight_versions": [2]}, {"index": 1}]
