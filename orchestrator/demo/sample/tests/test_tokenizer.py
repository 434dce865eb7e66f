import unittest

from calc import Token, TokenizeError, tokenize


def values(text):
    return [t.value for t in tokenize(text)]


class DecimalNumbersTest(unittest.TestCase):
    """A "." followed by a digit continues the number: one test per place a number can be."""

    def test_two_digit_fraction(self):
        self.assertEqual(values("3.25"), ["3.25", ""])

    def test_fraction_mid_input(self):
        self.assertEqual(values("1.5 + 2"), ["1.5", "+", "2", ""])

    def test_one_digit_fraction_at_end(self):
        self.assertEqual(values("0.5"), ["0.5", ""])

    def test_after_name(self):
        self.assertEqual(values("x * 10.75"), ["x", "*", "10.75", ""])


class TokenizeTest(unittest.TestCase):
    def test_integers_and_operators(self):
        self.assertEqual(values("12 + 3*4"), ["12", "+", "3", "*", "4", ""])
        self.assertEqual([t.kind for t in tokenize("12 + 3")], ["NUMBER", "OP", "NUMBER", "EOF"])

    def test_power_is_one_token(self):
        self.assertEqual(values("2**3"), ["2", "**", "3", ""])

    def test_names(self):
        self.assertEqual(values("rate * hours_2"), ["rate", "*", "hours_2", ""])

    def test_parentheses(self):
        self.assertEqual([t.kind for t in tokenize("(1)")], ["LPAREN", "NUMBER", "RPAREN", "EOF"])

    def test_positions(self):
        self.assertEqual([t.pos for t in tokenize("1 +  22")], [0, 2, 5, 7])

    def test_dot_without_digits_is_not_part_of_the_number(self):
        with self.assertRaisesRegex(TokenizeError, r"unexpected character '\.' at position 1"):
            tokenize("3.")

    def test_unexpected_character(self):
        with self.assertRaises(TokenizeError) as info:
            tokenize("2 $ 3")
        self.assertEqual(info.exception.pos, 2)

    def test_empty_input_is_just_eof(self):
        self.assertEqual(tokenize(""), [Token("EOF", "", 0)])


if __name__ == "__main__":
    unittest.main()
