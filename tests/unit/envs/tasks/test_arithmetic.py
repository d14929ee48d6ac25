from itertools import islice

from rlstack.envs.tasks.arithmetic import (
    ArithmeticConfig,
    Problem,
    heldout,
    parse_answer,
    problems,
    reward,
)


def test_stream_is_seeded_and_answers_are_right():
    first = list(islice(problems(ArithmeticConfig(seed=3, difficulty=3)), 50))
    again = list(islice(problems(ArithmeticConfig(seed=3, difficulty=3)), 50))
    assert first == again
    for p in first:
        a, op, b = p.question.removeprefix("Compute ").removesuffix(".").split()
        assert p.answer == eval(f"{a}{op}{b}")  # noqa: S307 - our own generated text


def test_difficulty_controls_operators():
    ops = {p.question.split()[2] for p in islice(problems(ArithmeticConfig(difficulty=1)), 100)}
    assert ops == {"+"}
    ops = {p.question.split()[2] for p in islice(problems(ArithmeticConfig(difficulty=3)), 300)}
    assert ops == {"+", "-", "*"}


def test_reward_exact_answer_and_format_bonus():
    p = Problem(question="Compute 2 + 3.", answer=5)
    plain = ArithmeticConfig()
    assert reward("5", p, plain) == 1.0
    assert reward("The answer is 5", p, plain) == 1.0
    assert reward("6", p, plain) == 0.0 and reward("no idea", p, plain) == 0.0
    shaped = ArithmeticConfig(format_reward=0.1)
    assert reward(" 5 ", p, shaped) == 1.1 and reward("7", p, shaped) == 0.1 and reward("it is 5", p, shaped) == 1.0


def test_parse_negative_numbers():
    assert parse_answer("-12") == -12 and parse_answer("x") is None


def test_heldout_set_is_fixed_distinct_and_never_in_the_stream():
    config = ArithmeticConfig(seed=5, heldout_size=40)
    held = heldout(config)
    assert len(held) == 40 and len({p.question for p in held}) == 40
    assert held == heldout(ArithmeticConfig(seed=9, heldout_size=40))  # the training seed does not move it
    seen = {p.question for p in islice(problems(config), 3000)}
    assert seen and not seen & {p.question for p in held}
