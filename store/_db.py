"""TEMP(reshape): ``orchestrator/_cmd_stats`` imports ``SCHEMA_HEAD`` from here until it follows
the move of ``store._db`` to ``store._engine``."""

from ._schema import SCHEMA_HEAD as SCHEMA_HEAD  # TEMP(reshape)
