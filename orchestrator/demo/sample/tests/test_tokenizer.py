import pytest

from calc import Token, TokenizeError, tokenize


def values(text):
    return [t.value for t in tokenize(text)]


def test_integers_and_operators():
    assert values("12 + 3*4") == ["12", "+", "3", "*", "4", ""]
    assert [t.kind for t in tokenize("12 + 3")] == ["NUMBER", "OP", "NUMBER", "EOF"]


def test_power_is_one_token():
    assert values("2**3") == ["2", "**", "3", ""]


def test_names():
    assert values("rate * hours_2") == ["rate", "*", "hours_2", ""]


def test_parentheses():
    assert [t.kind for t in tokenize("(1)")] == ["LPAREN", "NUMBER", "RPAREN", "EOF"]


def test_positions():
    assert [t.pos for t in tokenize("1 +  22")] == [0, 2, 5, 7]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3.25", ["3.25", ""]),
        ("1.5 + 2", ["1.5", "+", "2", ""]),
        ("0.5", ["0.5", ""]),
        ("x * 10.75", ["x", "*", "10.75", ""]),
    ],
    ids=["two-digit-fraction", "fraction-mid-input", "one-digit-fraction-at-end", "after-name"],
)
def test_decimal_numbers(text, expected):
    assert values(text) == expected


def test_dot_without_digits_is_not_part_of_the_number():
    with pytest.raises(TokenizeError, match=r"unexpected character '\.' at position 1"):
        tokenize("3.")


def test_unexpected_character():
    with pytest.raises(TokenizeError) as info:
        tokenize("2 $ 3")
    assert info.value.pos == 2


def test_empty_input_is_just_eof():
    assert tokenize("") == [Token("EOF", "", 0)]
