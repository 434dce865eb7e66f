"""``python -m calc "1 + 2 * x" x=3`` prints the value of an expression."""

from __future__ import annotations

import sys

from . import CalcError, calculate


def main(argv: list[str]) -> int:
    if not argv:
        print('usage: python -m calc EXPRESSION [NAME=VALUE ...]', file=sys.stderr)
        return 2
    env = {}
    for binding in argv[1:]:
        name, _, value = binding.partition("=")
        env[name] = float(value) if "." in value else int(value)
    try:
        print(calculate(argv[0], env))
    except CalcError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
