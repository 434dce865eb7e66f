import unittest

from calc import ParseError, parse
from calc.nodes import BinOp, Name, Num, UnaryOp


class ParserTest(unittest.TestCase):
    def test_atoms(self):
        self.assertEqual(parse("42"), Num(42))
        self.assertEqual(parse("rate"), Name("rate"))

    def test_multiplication_binds_tighter_than_addition(self):
        self.assertEqual(parse("1 + 2 * 3"), BinOp("+", Num(1), BinOp("*", Num(2), Num(3))))

    def test_modulo_binds_like_multiplication(self):
        self.assertEqual(parse("1 + 7 % 4"), BinOp("+", Num(1), BinOp("%", Num(7), Num(4))))

    def test_subtraction_is_left_associative(self):
        self.assertEqual(parse("8 - 3 - 2"), BinOp("-", BinOp("-", Num(8), Num(3)), Num(2)))

    def test_power_is_right_associative(self):
        self.assertEqual(parse("2 ** 3 ** 2"), BinOp("**", Num(2), BinOp("**", Num(3), Num(2))))

    def test_unary_minus_binds_looser_than_power(self):
        self.assertEqual(parse("-2 ** 2"), UnaryOp("-", BinOp("**", Num(2), Num(2))))
        self.assertEqual(parse("-2 * 3"), BinOp("*", UnaryOp("-", Num(2)), Num(3)))

    def test_parentheses_override_precedence(self):
        self.assertEqual(parse("(1 + 2) * x"), BinOp("*", BinOp("+", Num(1), Num(2)), Name("x")))

    def test_decimal_literal(self):
        self.assertEqual(parse("1.5 * x"), BinOp("*", Num(1.5), Name("x")))

    def test_unclosed_parenthesis(self):
        with self.assertRaisesRegex(ParseError, r"expected '\)' at position 6"):
            parse("(1 + 2")

    def test_trailing_tokens(self):
        with self.assertRaisesRegex(ParseError, "unexpected '2' at position 2"):
            parse("1 2")

    def test_missing_operand(self):
        with self.assertRaisesRegex(ParseError, "unexpected end of input"):
            parse("1 +")


if __name__ == "__main__":
    unittest.main()
