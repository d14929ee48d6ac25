from decimal import Decimal
from itertools import islice

import pytest

from rlstack.envs.tasks.gsm8k import (
    SAMPLES,
    GSM8KConfig,
    GSM8KTask,
    extract_answer,
    load,
    reference_answer,
    to_number,
)


def test_bundled_samples_parse_and_answers_are_numbers():
    problems = load(GSM8KConfig(path=SAMPLES))
    assert len(problems) >= 12 and all(p.question.strip() for p in problems)
    assert all(to_number(p.answer) is not None for p in problems)


def test_answer_extraction_compares_numbers():
    assert reference_answer("3 + 4 = 7\n#### 7") == "7"
    with pytest.raises(ValueError, match="####"):
        reference_answer("no marker")
    assert extract_answer("so 1,200 liters\n#### 1,200") == Decimal("1200")
    assert extract_answer("the total is $45.") == Decimal("45")
    assert extract_answer("first 3, then 8") == Decimal("8")
    assert extract_answer("#### -4") == Decimal("-4")
    assert extract_answer("no idea") is None


def test_task_scores_holds_out_and_streams(tmp_path):
    path = tmp_path / "gsm.jsonl"
    rows = [f'{{"question": "q{i}", "answer": "work\\n#### {i * 10}"}}' for i in range(6)]
    path.write_text("\n".join(rows) + "\n")
    task = GSM8KTask(GSM8KConfig(path=path, heldout_size=2, seed=1))
    held = task.heldout()
    assert [p.question for p in held] == ["q0", "q1"]
    seen = {p.question for p in islice(task.stream(), 12)}
    assert seen == {"q2", "q3", "q4", "q5"}
    problem = held[1]
    assert task.score("10 apples\n#### 10.0", problem) == 1.0
    assert task.score("#### 11", problem) == 0.0
    assert task.messages(problem)[-1] == {"role": "user", "content": "q1"}
    with pytest.raises(ValueError, match="held out"):
        GSM8KTask(GSM8KConfig(path=path, heldout_size=6))


def test_no_path_and_no_hugging_face_is_an_error_not_a_silent_fallback(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails as if not installed
    with pytest.raises(RuntimeError, match="set the gsm8k task's dataset_path"):
        load(GSM8KConfig())
