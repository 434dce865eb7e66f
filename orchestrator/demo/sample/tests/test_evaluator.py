import pytest

from calc import CalcError, EvaluationError, calculate


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("8 - 3 - 2", 3),
        ("2 ** 3 ** 2", 512),
        ("-2 ** 2", -4),
        ("7 / 2", 3.5),
        ("7 % 4", 3),
        ("2 ** -1", 0.5),
    ],
)
def test_arithmetic(text, expected):
    assert calculate(text) == expected


def test_names_come_from_the_environment():
    assert calculate("rate * hours", {"rate": 1.5, "hours": 8}) == 12.0


def test_unknown_name():
    with pytest.raises(EvaluationError, match="unknown name 'y'"):
        calculate("x + y", {"x": 1})


@pytest.mark.parametrize("text", ["1 / 0", "1 / (2 - 2)", "7 % 0"])
def test_division_by_zero_is_an_evaluation_error(text):
    with pytest.raises(EvaluationError, match="division by zero"):
        calculate(text)


def test_zero_to_a_negative_power():
    with pytest.raises(EvaluationError, match="negative power"):
        calculate("0 ** -1")


def test_complex_results_are_refused():
    with pytest.raises(EvaluationError, match="not a real number"):
        calculate("(0 - 8) ** 0.25")


def test_every_error_is_a_calc_error():
    for text in ["2 $ 3", "(1", "1 / 0"]:
        with pytest.raises(CalcError):
            calculate(text)
