import unittest

from calc import CalcError, EvaluationError, calculate


class ArithmeticTest(unittest.TestCase):
    """Python's precedence and associativity: one test per rule."""

    def test_times_before_plus(self):
        self.assertEqual(calculate("1 + 2 * 3"), 7)

    def test_parentheses_first(self):
        self.assertEqual(calculate("(1 + 2) * 3"), 9)

    def test_minus_is_left_associative(self):
        self.assertEqual(calculate("8 - 3 - 2"), 3)

    def test_power_is_right_associative(self):
        self.assertEqual(calculate("2 ** 3 ** 2"), 512)

    def test_power_before_unary_minus(self):
        self.assertEqual(calculate("-2 ** 2"), -4)

    def test_true_division(self):
        self.assertEqual(calculate("7 / 2"), 3.5)

    def test_modulo(self):
        self.assertEqual(calculate("7 % 4"), 3)

    def test_negative_exponent(self):
        self.assertEqual(calculate("2 ** -1"), 0.5)


class DivisionByZeroTest(unittest.TestCase):
    """Division by zero is an EvaluationError, whichever operator divides."""

    def check(self, text):
        with self.assertRaisesRegex(EvaluationError, "division by zero"):
            calculate(text)

    def test_divide_by_zero(self):
        self.check("1 / 0")

    def test_divide_by_an_expression_that_is_zero(self):
        self.check("1 / (2 - 2)")

    def test_modulo_by_zero(self):
        self.check("7 % 0")


class EvaluatorTest(unittest.TestCase):
    def test_names_come_from_the_environment(self):
        self.assertEqual(calculate("rate * hours", {"rate": 1.5, "hours": 8}), 12.0)

    def test_unknown_name(self):
        with self.assertRaisesRegex(EvaluationError, "unknown name 'y'"):
            calculate("x + y", {"x": 1})

    def test_zero_to_a_negative_power(self):
        with self.assertRaisesRegex(EvaluationError, "negative power"):
            calculate("0 ** -1")

    def test_complex_results_are_refused(self):
        with self.assertRaisesRegex(EvaluationError, "not a real number"):
            calculate("(0 - 8) ** 0.25")

    def test_every_error_is_a_calc_error(self):
        for text in ["2 $ 3", "(1", "1 / 0"]:
            with self.subTest(text=text), self.assertRaises(CalcError):
                calculate(text)


if __name__ == "__main__":
    unittest.main()
